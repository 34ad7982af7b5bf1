"""An int8 build of the dense model, made once per install from its ONNX file and cached on disk.

The packaged all-MiniLM-L6-v2 stores its weights as int8 but computes in float32 (each weight is
cast back when the session loads). Quantising the matrix products themselves (dynamic
quantisation: weights int8 per output channel, each activation scaled at run time) makes the
model about 1.7x cheaper per word piece on CPUs with int8 dot-product instructions, at a mean
cosine of 0.995 to the float32 vectors; bench/retrieval.py measures what that does to ranking.

The activation scale is computed over the whole input, so a text encoded in a padded batch gets
slightly different numbers than alone; `DenseEmbedder` therefore encodes each text on its own
(which is also the fastest way on a CPU: no padding), so a chunk's vector depends only on its text.

The build is deterministic (same source file, same file out), takes about 2 s, and is made by
`headwater doctor` at install time; a process that finds it missing makes it on first use.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

# Names what the build does: part of the model's identity, so a changed recipe is a new model.
RECIPE = "int8-dynamic-per-channel-v1"


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:12]


def int8_model(source: Path, cache_dir: Path | None = None) -> Path:
    """The int8 build of the ONNX model at `source`: the cached file, made now if there is none."""
    from workers.onnx_session import model_cache_dirs

    name = f"dense-{file_digest(source)}-{RECIPE}.onnx"
    directories = model_cache_dirs(cache_dir)
    for directory in directories:
        if (directory / name).is_file():
            return directory / name
    errors = []
    for directory in directories:
        try:
            directory.mkdir(parents=True, exist_ok=True)
            return _build(source, directory / name)
        except OSError as exc:  # a read-only virtualenv in an image: try the next place
            errors.append(f"{directory}: {exc.strerror or exc}")
    from headwater.errors import ConfigurationError

    raise ConfigurationError(f"cannot write the int8 dense model anywhere ({'; '.join(errors)}); set "
                             "HEADWATER_ONNX_CACHE_DIR to a writable directory, or HEADWATER_DENSE_INT8=false")


def _build(source: Path, target: Path) -> Path:
    import onnxruntime
    from onnxruntime.quantization import QuantType, quantize_dynamic

    log.info("building the int8 dense model from %s (once per install)", source)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        # Fold the weight casts into plain float initializers first: the quantiser only recognises
        # a matrix product whose weight is a constant.
        folded = Path(scratch) / "folded.onnx"
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        options.log_severity_level = 3
        onnxruntime.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        built = Path(scratch) / target.name
        # Per-channel weights keep the vectors close to float32 (mean cosine 0.995, where one scale
        # per matrix gave 0.94); only weight products are quantised, never attention's
        # activation-by-activation products.
        root = logging.getLogger()
        root.addFilter(_drop_suggestion)
        try:
            quantize_dynamic(folded, built, weight_type=QuantType.QInt8, per_channel=True,
                             extra_options={"MatMulConstBOnly": True})
        finally:
            root.removeFilter(_drop_suggestion)
        os.replace(built, target)  # atomic: concurrent builders (several workers) never see half a file
    return target


def _drop_suggestion(record: logging.LogRecord) -> bool:
    """The quantiser suggests a pre-processing step through the root logger on every call."""
    return "pre-processing before quantization" not in record.getMessage()

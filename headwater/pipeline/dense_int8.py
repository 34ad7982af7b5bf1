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

The same products on every CPU. onnxruntime multiplies uint8 activations by int8 weights with
instructions that add pairs of products in 16 bits on CPUs without VNNI (AVX2 alone, as on AMD
Zen 3): a pair above 32,767 saturates, so such a machine computed other vectors than one with
VNNI or AMX (mean cosine 0.991 between the two on stdlib text, and 0.990 to float32 against
0.994 for exact products; `bench/dense_int8_kernels.py`). Where a probe finds that this CPU
saturates, the build stores the same weights as uint8 (each shifted by 128, and so its zero
point), whose products onnxruntime computes exactly; the integer results, and so the vectors,
are those of the int8 weights on a CPU that does not saturate. Same model, same identity;
1.14x the dense model's CPU on such a machine (measured on an AMD EPYC Zen 3).
"""

from __future__ import annotations

import functools
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


# The probe: one MatMulInteger, uint8 A (32 x 64) times int8 B (64 x 16), as serialised ONNX (opset
# 13, IR 8). Kept as bytes because importing the onnx package to build it costs ~0.9 s, on the
# path of every process that loads the model, `headwater query` included; tests/unit/
# test_dense_int8.py parses it with onnx and checks that it is this graph.
PROBE_SHAPE = (32, 64, 16)  # rows, depth, columns: several of each, as a sequence of word pieces has
PROBE_MODEL = bytes.fromhex(
    "08083a600a180a01410a0142120159220d4d61744d756c496e7465676572120570726f62655a130a0141120e0a0c08"
    "0212080a0208200a0208405a130a0142120e0a0c080312080a0208400a02081062130a0159120e0a0c080612080a02"
    "08200a02081042040a00100d")


@functools.cache
def signed_products_exact() -> bool:
    """Whether onnxruntime on this CPU multiplies uint8 by int8 matrices without saturating.

    Asked of the runtime itself, not of the CPU's feature flags: 255 x 127 pairs exceed the 16-bit
    sums of the kernels that saturate. Several rows and columns, so that the runtime picks its
    matrix kernel rather than a single-row one.
    """
    import numpy as np
    import onnxruntime

    rows, depth, columns = PROBE_SHAPE
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(PROBE_MODEL, options, providers=["CPUExecutionProvider"])
    a, b = np.full((rows, depth), 255, dtype=np.uint8), np.full((depth, columns), 127, dtype=np.int8)
    return bool(np.array_equal(session.run(None, {"A": a, "B": b})[0], a.astype(np.int32) @ b.astype(np.int32)))


def int8_model(source: Path, cache_dir: Path | None = None, unsigned_weights: bool | None = None) -> Path:
    """The int8 build of the ONNX model at `source`: the cached file, made now if there is none.

    Its weights are stored unsigned where this CPU's signed products saturate (module docstring);
    `unsigned_weights` chooses for tests and benchmarks.
    """
    from headwater.pipeline.onnx_session import model_cache_dirs

    if unsigned_weights is None:
        unsigned_weights = not signed_products_exact()
    name = f"dense-{file_digest(source)}-{RECIPE}{'-u8' if unsigned_weights else ''}.onnx"
    directories = model_cache_dirs(cache_dir)
    for directory in directories:
        if (directory / name).is_file():
            return directory / name
    errors = []
    for directory in directories:
        try:
            directory.mkdir(parents=True, exist_ok=True)
            return _build(source, directory / name, unsigned_weights)
        except OSError as exc:  # a read-only virtualenv in an image: try the next place
            errors.append(f"{directory}: {exc.strerror or exc}")
    from headwater.errors import ConfigurationError

    raise ConfigurationError(f"cannot write the int8 dense model anywhere ({'; '.join(errors)}); set "
                             "HEADWATER_ONNX_CACHE_DIR to a writable directory, or HEADWATER_DENSE_INT8=false")


def _build(source: Path, target: Path, unsigned_weights: bool) -> Path:
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
        if unsigned_weights:
            _store_weights_unsigned(built)
        os.replace(built, target)  # atomic: concurrent builders (several workers) never see half a file
    return target


def _store_weights_unsigned(model_file: Path) -> None:
    """Rewrite every int8 weight (and its zero point) of a MatMulInteger as uint8 plus 128, in place.

    (a - za)(w + 128 - (zw + 128)) = (a - za)(w - zw): the integer results are unchanged, and
    onnxruntime computes uint8-by-uint8 products without saturating on every CPU.
    """
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(model_file))
    initializers = {tensor.name: tensor for tensor in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type != "MatMulInteger":
            continue
        weight, zero_point = node.input[1], node.input[3] if len(node.input) > 3 else ""
        if weight not in initializers or not zero_point or zero_point not in initializers:
            raise RuntimeError(f"unexpected int8 graph: {node.name} lacks a constant weight or zero point")
        for name in (weight, zero_point):
            values = numpy_helper.to_array(initializers[name])
            if values.dtype != np.int8:
                raise RuntimeError(f"unexpected int8 graph: {name} is {values.dtype}, not int8")
            initializers[name].CopyFrom(numpy_helper.from_array((values.astype(np.int16) + 128).astype(np.uint8), name))
    onnx.save(model, str(model_file))


def _drop_suggestion(record: logging.LogRecord) -> bool:
    """The quantiser suggests a pre-processing step through the root logger on every call."""
    return "pre-processing before quantization" not in record.getMessage()

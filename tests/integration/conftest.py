"""Real models (loaded once per session) and a fresh embedded Chroma per test."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from connectors.folder import FolderConnector
from headwater.pipeline.stores import open_store
from headwater.sync.embedded import open_sparse_index
from headwater.settings import Settings
from headwater.sync.sync_engine import SyncEngine
from tests.documents import write_binary_formats
from headwater.pipeline.embed_dense import DenseEmbedder
from headwater.pipeline.embed_sparse import SpladeEncoder

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "docs"


@pytest.fixture(scope="session")
def dense() -> DenseEmbedder:
    return DenseEmbedder()


@pytest.fixture(scope="session")
def sparse() -> SpladeEncoder:
    return SpladeEncoder()


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    """A copy of the sample folder plus the binary formats, which are built rather than committed."""
    folder = tmp_path / "docs"
    shutil.copytree(EXAMPLES, folder)
    write_binary_formats(folder)
    return folder


class Harness:
    """An engine over a folder, with every Chroma write recorded."""

    def __init__(self, root: Path, chroma: Path, dense: DenseEmbedder, sparse: SpladeEncoder, **overrides) -> None:
        self.settings = Settings(chroma_path=chroma, collection="test", **overrides)
        self.writes: list[tuple[str, int]] = []
        self.store = open_store(self.settings, dense_model=dense.name, sparse_model=sparse.name,
                                 observers=[lambda op, ids, *_: self.writes.append((op, len(ids)))])
        self.index_dir = chroma / "headwater-sparse" / "test"
        self.index = open_sparse_index(self.store, self.index_dir, save=True)
        self.store.observers.append(self.index.written)
        self.engine = SyncEngine(self.store, dense, sparse, self.settings, sparse_index=self.index)
        self.sparse = sparse
        self.connector = FolderConnector("docs", root, debounce_seconds=0.3)
        self.dense = dense

    def sync(self):
        return self.engine.sync(self.connector)

    def searcher(self):
        from headwater.retrieval.searcher import Searcher

        return Searcher(self.store, self.dense, self.sparse, self.index, self.index_dir)

    def records(self) -> dict[str, dict]:
        """uri -> {id: metadata} for everything stored."""
        result = self.store.collection.get(include=["metadatas"])
        out: dict[str, dict] = {}
        for record_id, metadata in zip(result["ids"], result["metadatas"]):
            out.setdefault(metadata["uri"], {})[record_id] = metadata
        return out


@pytest.fixture
def harness(sample: Path, tmp_path: Path, dense: DenseEmbedder, sparse: SpladeEncoder) -> Harness:
    return Harness(sample, tmp_path / "chroma", dense, sparse)


@pytest.fixture
def make_harness(tmp_path: Path, dense: DenseEmbedder, sparse: SpladeEncoder):
    def build(root: Path, chroma: Path | None = None, **overrides) -> Harness:
        return Harness(root, chroma or tmp_path / "chroma", dense, sparse, **overrides)
    return build

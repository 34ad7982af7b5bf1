"""The crafted corpus synced into an embedded Chroma with the real models, ready to consolidate."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from connectors.folder import FolderConnector
from headwater.pipeline.stores import open_store
from headwater.consolidation.config import ConsolidationSettings
from headwater.consolidation.consolidator import Consolidator
from headwater.consolidation.knowledge import open_knowledge
from headwater.settings import Settings
from headwater.store.sparse_codec import encode_sparse
from headwater.sync.sync_engine import SyncEngine
from tests.consolidation_corpus import write_corpus


class CorpusHarness:
    def __init__(self, root: Path, chroma: Path, dense: Any, sparse: Any) -> None:
        self.root = write_corpus(root)
        self.settings = Settings(chroma_path=chroma, collection="corpus")
        self.dense, self.sparse = dense, sparse
        self.store = open_store(self.settings, dense_model=dense.name, sparse_model=sparse.name)
        self.engine = SyncEngine(self.store, dense, sparse, self.settings)
        self.connector = FolderConnector("docs", self.root, debounce_seconds=0.3)
        self.config = ConsolidationSettings()
        self.knowledge = open_knowledge(self.store.client, self.config.knowledge_name("corpus"))

    def sync(self):
        return self.engine.sync(self.connector)

    def consolidator(self, backend=None, **options: Any) -> Consolidator:
        return Consolidator(self.store.collection, self.knowledge, thresholds=self.config.thresholds(),
                            backend=backend, dense=lambda t: [list(map(float, v)) for v in self.dense.embed(t)],
                            sparse=lambda t: [encode_sparse(i, v) for i, v in self.sparse.encode(t)], **options)

    def uri_of(self) -> dict[str, str]:
        got = self.store.collection.get(include=["metadatas"])
        return {i: m["uri"] for i, m in zip(got["ids"], got["metadatas"])}

    def knowledge_records(self) -> list[dict[str, Any]]:
        got = self.knowledge.get(include=["metadatas", "documents", "embeddings"])
        return [{"id": i, "text": t, "embedding": e, **m}
                for i, t, e, m in zip(got["ids"], got["documents"], got["embeddings"], got["metadatas"])]


def require_llama_cpp() -> None:
    """Skip the test without llama-cpp-python; in CI (which installs the llm extra) fail it instead."""
    import pytest

    try:
        import llama_cpp  # noqa: F401
    except ImportError as exc:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(
            f"llama-cpp-python (Headwater's llm extra, scripts/install.sh --test) is not installed ({exc})")

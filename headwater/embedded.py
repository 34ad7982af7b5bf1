"""Embedded mode: the whole pipeline in this process, against a local Chroma directory held by one writer."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from headwater.chroma_store import ChromaStore, WriteObserver, make_client
from headwater.path_lock import ChromaPathLock
from headwater.settings import Settings
from headwater.sync_engine import Progress, SyncEngine
from workers.embed_dense import DenseEmbedder
from workers.embed_sparse import SpladeEncoder


@contextlib.contextmanager
def open_engine(settings: Settings, progress: Progress | None = None,
                on_write: WriteObserver | None = None) -> Iterator[SyncEngine]:
    """A ready SyncEngine; while it is open, no other Headwater process may write the same directory."""
    lock = contextlib.nullcontext() if settings.chroma_host else ChromaPathLock(settings.chroma_path)
    with lock:
        dense = DenseEmbedder(settings.dense_model_dir, settings.model_threads, settings.embed_batch_size)
        sparse = SpladeEncoder(settings.sparse_model_dir, settings.model_threads, settings.embed_batch_size)
        store = ChromaStore(make_client(settings), settings.collection, batch_size=settings.upsert_batch_size,
                            dense_model=dense.name, sparse_model=sparse.name, on_write=on_write)
        yield SyncEngine(store, dense, sparse, settings, progress)

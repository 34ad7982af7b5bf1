"""Embedded mode: the whole pipeline in this process, against a local Chroma directory held by one writer."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from headwater.store.chroma_store import ChromaStore, WriteObserver
from headwater.pipeline.stores import open_store
from headwater.lazy import Lazy
from headwater.pipeline.model_identity import sparse_identity
from headwater.store.path_lock import ChromaPathLock
from headwater.settings import Settings
from headwater.pipeline.skipped_versions import FileSkippedVersions, NoSkippedVersions
from headwater.retrieval.sparse_index_files import open_sparse_index, sparse_index_dir  # noqa: F401  (re-exported)
from headwater.sync.sync_engine import Progress, SyncEngine
from headwater.pipeline.dense_source import dense_embedder, dense_model_identity
from headwater.pipeline.embed_sparse import SpladeEncoder


@contextlib.contextmanager
def open_engine(settings: Settings, progress: Progress | None = None,
                observers: Sequence[WriteObserver] = ()) -> Iterator[SyncEngine]:
    """A ready SyncEngine; while it is open, no other Headwater process may write the same directory."""
    lock = contextlib.nullcontext() if settings.is_remote else ChromaPathLock(settings.chroma_path)
    with lock:
        threads = settings.model_threads or 1  # per runtime; the engine runs one lane per core (headwater.pipeline.embed_lanes)
        # Loaded only when a pass has text to embed: an unchanged re-sync never loads them.
        dense = Lazy(lambda: dense_embedder(settings, threads))
        sparse = Lazy(lambda: SpladeEncoder(settings.sparse_model_dir, threads, settings.onnx_cache_dir))
        yield engine_for(settings, dense, sparse, progress, observers)


def engine_for(settings: Settings, dense: Any, sparse: SpladeEncoder | Lazy,
               progress: Progress | None = None, observers: Sequence[WriteObserver] = ()) -> SyncEngine:
    """A SyncEngine for settings.collection with these models; the caller holds the directory's lock.

    One process can write several collections of its embedded directory (embedded serve, a source
    per collection): each gets an engine of its own, all of them sharing the one lock and models.
    """
    store = open_store(settings, dense_model=dense_model_identity(settings),
                       sparse_model=sparse_identity(settings.sparse_model_dir), observers=observers)
    index = None
    if not settings.is_remote:
        # Opened when a pass has something to write (SyncEngine.apply) or a search needs it: an
        # unchanged pass over 200,000 chunks must not spend seconds and hundreds of MB loading it.
        directory = sparse_index_dir(settings)
        index = Lazy(lambda: open_sparse_index(store, directory, save=True))
        store.observers.append(lambda operation, ids, metadatas, embeddings:
                               index.written(operation, ids, metadatas, embeddings))
    elif not settings.is_cloud:  # Chroma Cloud indexes the sparse vectors itself
        _log_writes(settings, store)
    skipped = NoSkippedVersions() if settings.is_remote else \
        FileSkippedVersions(Path(settings.chroma_path) / "headwater-skipped" / settings.collection)
    return SyncEngine(store, dense, sparse, settings, progress, sparse_index=index, skipped=skipped)


def _log_writes(settings: Settings, store: ChromaStore) -> None:
    """Against a Chroma server, log writes for the searchers that follow it (headwater.retrieval.write_log)."""
    import logging

    from headwater.redis_connection import redis_client
    from headwater.retrieval.write_log import WriteLog

    redis = redis_client(settings)
    try:
        redis.ping()
    except Exception as exc:  # noqa: BLE001
        logging.getLogger(__name__).warning(
            "no Redis at the configured URL (%s): searchers of this server will notice these writes "
            "only at their next audit (a rebuild)", type(exc).__name__)
        return
    store.observers.append(WriteLog(redis, store.collection.name))

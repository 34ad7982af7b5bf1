"""The consolidation stage: plain functions the CLI, embedded mode's writers and the fleet's task call.

Embedded mode consolidates after writes in one place, `after_embedded_pass`, which `headwater sync`,
`headwater watch` and embedded `headwater serve` call after each pass.

The fleet feeds it through `ConsolidationTrigger`, a write observer on every collection a worker
writes: the first write after a quiet spell schedules one pass of that collection a debounce
interval later, so a run of thousands of writes costs one pass, not thousands. The beat schedule
adds a periodic sweep of every collection, which removes whatever a lost message left behind.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from headwater.store.chroma_store import DENSE_MODEL_KEY, SPARSE_MODEL_KEY, make_client
from headwater.consolidation.config import ConsolidationSettings, make_backend
from headwater.consolidation.consolidator import Consolidator, PassReport
from headwater.consolidation.knowledge import open_knowledge
from headwater.lazy import Lazy
from headwater.redis_connection import release_quietly
from headwater.settings import Settings

log = logging.getLogger(__name__)
NOT_DATA_SUFFIXES = ("__manifest", "__knowledge")


def trigger_key(collection: str) -> str:
    return f"headwater:consolidate:{collection}:pending"


def lock_key(collection: str) -> str:
    return f"headwater:consolidate:{collection}:lock"


def last_report_key(collection: str) -> str:
    return f"headwater:consolidate:{collection}:last"


def embedders(settings: Settings) -> tuple[Callable[[list[str]], list[list[float]]], Callable[[list[str]], list[str]]]:
    """Dense and sparse encoders for new knowledge texts, loaded only when a pass has one to embed."""
    from headwater.store.sparse_codec import encode_sparse
    from headwater.pipeline.dense_source import dense_embedder
    from headwater.pipeline.embed_sparse import SpladeEncoder

    threads = settings.model_threads or 1
    dense = Lazy(lambda: dense_embedder(settings, threads))
    sparse = Lazy(lambda: SpladeEncoder(settings.sparse_model_dir, threads, settings.onnx_cache_dir))
    return (lambda texts: [list(map(float, v)) for v in dense.embed(texts)],
            lambda texts: [encode_sparse(i, v) for i, v in sparse.encode(texts)])


def consolidator_for(client: Any, settings: Settings, config: ConsolidationSettings, *,
                     dense: Callable | None = None, sparse: Callable | None = None) -> Consolidator:
    """A Consolidator of the configured collection, writing its knowledge collection on the same client."""
    from headwater.store.chroma_store import write_batch_limit
    from chromadb.errors import NotFoundError

    from headwater.errors import ConfigurationError

    try:
        source = client.get_collection(settings.collection, embedding_function=None)
    except (NotFoundError, ValueError):  # ValueError: how older clients say it
        raise ConfigurationError(f"there is no collection {settings.collection!r} to consolidate; "
                                 "run `headwater sync` first or pass --collection") from None
    models = {k: v for k, v in (source.metadata or {}).items() if k in (DENSE_MODEL_KEY, SPARSE_MODEL_KEY)}
    knowledge = open_knowledge(client, config.knowledge_name(settings.collection), models=models)
    if dense is None or sparse is None:
        dense, sparse = embedders(settings)
    batch = write_batch_limit(settings.upsert_batch_size, client.get_max_batch_size(), settings.is_cloud)
    return Consolidator(source, knowledge, thresholds=config.thresholds(), backend=lambda: make_backend(config),
                        retries=config.llm_retries, token_budget=config.token_budget, dense=dense, sparse=sparse,
                        batch=batch)


@contextlib.contextmanager
def _embedded_lock(settings: Settings) -> Iterator[None]:
    if settings.is_remote:
        yield
        return
    from headwater.store.path_lock import ChromaPathLock

    with ChromaPathLock(settings.chroma_path):
        yield


def consolidate(settings: Settings, config: ConsolidationSettings | None = None, *, dry_run: bool = False,
                token_budget: int | None = None) -> PassReport:
    """One pass over the configured collection (embedded: holding the directory's writer lock)."""
    config = config or ConsolidationSettings()
    if token_budget is not None:
        config = config.model_copy(update={"token_budget": token_budget})
    with _embedded_lock(settings):
        return consolidator_for(make_client(settings), settings, config).run(dry_run=dry_run)


def wrote_something(report: Any) -> bool:
    """Whether a pass's report says it changed the collection (a document indexed, moved or removed)."""
    return bool(report.added or report.updated or report.moved or report.deleted or report.chunks_deleted)


def after_embedded_pass(engine: Any, report: Any, config: ConsolidationSettings | None = None) -> PassReport | None:
    """Embedded mode's one rule for consolidation after writes, called by every embedded writer
    (`headwater sync`, `headwater watch`, embedded `headwater serve`) after each pass.

    With `HEADWATER_CONSOLIDATE_AFTER_SYNC=true`, a pass that wrote is followed by one consolidation
    pass of the engine's collection, on the engine's own client (this process holds the directory's
    writer lock); an unchanged pass costs nothing. The fleet's counterpart is `ConsolidationTrigger`.
    Errors of the pass (no LLM configured, say) are the caller's to report: the writes stand either way.
    """
    config = config or ConsolidationSettings()
    if not config.after_sync or not wrote_something(report):
        return None
    settings = engine.settings.model_copy(update={"collection": engine.store.collection.name})
    done = consolidator_for(engine.store.client, settings, config).run()
    log.info("consolidated %s after a pass that wrote: %d knowledge records written, %d removed",
             settings.collection, done.written, done.removed)
    return done


# Fleet ---------------------------------------------------------------------------------------

class ConsolidationTrigger:
    """ChromaStore write observer: one pass of the collection per debounce interval while writes come in."""

    def __init__(self, redis: Any, send: Callable[..., None], collection: str, debounce_seconds: float) -> None:
        self.redis, self.send, self.collection = redis, send, collection
        self.debounce = max(1.0, debounce_seconds)

    def __call__(self, operation: str, ids: Sequence[str], metadatas: Sequence[dict[str, Any]] | None,
                 embeddings: Sequence[Any] | None = None) -> None:
        if operation not in ("upsert", "delete") or not ids:
            return  # metadata updates (consolidation's own pointers among them) change no knowledge
        from headwater import queues as names

        if self.redis.set(trigger_key(self.collection), "1", nx=True, ex=int(self.debounce * 4) + 1):
            self.send(names.CONSOLIDATE, [self.collection], countdown=self.debounce)


def fleet_consolidate(redis: Any, settings: Settings, collection: str, config: ConsolidationSettings | None = None,
                      resend: Callable[[float], None] | None = None) -> PassReport | None:
    """The fleet task's body: one pass, never two of a collection at once; the report kept in Redis."""
    config = config or ConsolidationSettings()
    hold = int(max(600, config.llm_timeout_seconds * 10))
    lock = redis.lock(lock_key(collection), timeout=hold, blocking=False)
    if not lock.acquire():
        if resend is not None:  # a pass is running: look again once it has likely finished
            resend(config.debounce_seconds)
        return None
    try:
        # Writes from now on schedule the next pass: this one may read before they land.
        redis.delete(trigger_key(collection))
        settings = settings.model_copy(update={"collection": collection})
        report = consolidator_for(make_client(settings, fleet=True), settings, config).run()
        summary = report.to_json()
        summary["rows"] = summary["rows"][:200]
        redis.set(last_report_key(collection), json.dumps(summary))
        log.info("consolidated %s: %d chunks, %d copy groups, %d pairs to the LLM, %d written, %d removed",
                 collection, report.chunks, report.copy_clusters, report.llm_pairs, report.written, report.removed)
        return report
    finally:
        release_quietly(lock, f"consolidation of {collection!r}")


def data_collections(client: Any) -> list[str]:
    """Collections Headwater wrote (they record their models), without manifests and knowledge collections."""
    out = []
    for collection in client.list_collections():
        name = collection.name if hasattr(collection, "name") else str(collection)
        if name.endswith(NOT_DATA_SUFFIXES):
            continue
        metadata = getattr(collection, "metadata", None) or {}
        if DENSE_MODEL_KEY in metadata:
            out.append(name)
    return sorted(out)


def consolidation_trigger(redis: Any, send: Callable[..., None], collection: str) -> Callable[..., None]:
    """The fleet's observer for one collection, with the configured debounce (a no-op when turned off)."""
    config = ConsolidationSettings()
    if not config.on_write:
        return lambda operation, ids, metadatas, embeddings=None: None
    return ConsolidationTrigger(redis, send, collection, config.debounce_seconds)

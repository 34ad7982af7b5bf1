"""Fleet mode: the pipeline as a chain of queued steps over Redis, writing to a Chroma server.

Each function here is one step, called by a thin Celery task (workers/tasks.py); a step ends by
sending the next step's task, never by waiting for one. The steps reuse the embedded mode's
stage functions and document planning, so both modes write the same records.

    sync_source -> feed (flow control, per run) -> fetch -> parse -> embed_sparse + embed_dense
                                                                       -> (both done) ready -> flush

Every step is safe to run twice: ids are deterministic, a document's content is claimed once
(source, uri, content hash), vectors are cached by content hash, and the upsert batch is leased,
so a worker killed mid-batch leaves it to be reclaimed rather than lost.
"""

from __future__ import annotations

import functools
import json
import logging
import time
import uuid
from dataclasses import asdict
from typing import Any


from connectors import build_connector
from headwater import chroma_store as keys
from headwater.chroma_store import ChromaStore
from headwater.document_plan import DocumentFacts, plan_document
from headwater.errors import DocumentVanished, PermanentDocumentError, SkippedDocument
from headwater.models import ChunkRecord, DocumentChange, Op
from headwater.payloads import PayloadStore
from headwater.runs import RunStore
from headwater.settings import Settings
from headwater.sparse_codec import encode_sparse
from workers import names
from workers.chunk import chunk_document
from workers.fetch import fetch_document
from workers.parse import parse_document
from workers.upsert import BatchWriter

log = logging.getLogger(__name__)
_K = "headwater:"
EMBEDDED_TEXTS = _K + "stats:embedded-texts"  # texts that went through a model, all runs


def redis_client(settings: Settings) -> Any:
    """A Redis client for the configured URL."""
    import redis

    return redis.Redis.from_url(settings.redis_url.get_secret_value())


class Fleet:
    """The per-process resources a step needs; models and clients are created on first use."""

    def __init__(self, settings: Settings, send: Any) -> None:
        self.settings = settings
        self.send = send  # send(task_name, args, countdown=None): enqueue a step
        self.redis = redis_client(settings)
        self.runs = RunStore(self.redis)
        # Payloads outlive any retry schedule: a run must not lose a document to an expiry.
        self.payloads = PayloadStore(self.redis, settings.visibility_timeout_seconds * 24)
        # Write-side state belongs to one collection: workers of another collection never touch it.
        self.ns = f"{_K}{settings.collection}:"
        self.ready = self.ns + "ready"  # documents whose vectors are complete, waiting for a batch
        self.leases = self.ns + "flush-leases"  # batch token -> lease start
        self.flush_scheduled = self.ns + "flush-scheduled"

    @functools.cached_property
    def store(self) -> ChromaStore:
        return ChromaStore.from_settings(self.settings, fleet=True, dense_model=self.dense_name,
                                         sparse_model=self.sparse_name)

    # Collection metadata names the models; workers that embed know them, the others read them.
    dense_name = "all-MiniLM-L6-v2"
    sparse_name = "splade:splade-tiny"

    @functools.cached_property
    def dense(self) -> Any:
        from workers.embed_dense import DenseEmbedder

        s = self.settings
        return DenseEmbedder(s.dense_model_dir, s.model_threads, s.embed_batch_size)

    @functools.cached_property
    def sparse(self) -> Any:
        from workers.embed_sparse import SpladeEncoder

        s = self.settings
        return SpladeEncoder(s.sparse_model_dir, s.model_threads)

    # Run bookkeeping -------------------------------------------------------------------------

    def _run_key(self, run_id: str, part: str) -> str:
        return f"{_K}run:{run_id}:{part}"

    def _done(self, run_id: str, uri: str, counter: str | None = None) -> None:
        """A document of the run reached its end (indexed, unchanged, skipped or failed), counted once.

        A task redelivered after a worker died may get here twice for one document; the set
        keeps the run's arithmetic right so it neither finishes early nor hangs.
        """
        if self.redis.sadd(self._run_key(run_id, "done"), uri):
            if counter:
                self.runs.count(run_id, counter)
            self.redis.hincrby(f"{_K}run:{run_id}", "done", 1)

    def _connector(self, run_id: str) -> Any:
        spec = json.loads(self.redis.get(self._run_key(run_id, "source")))
        return build_connector(spec["kind"], spec["id"], **spec["options"])


def enqueue_sync(fleet: Fleet, kind: str, source_id: str, options: dict[str, Any], run_kind: str = "full") -> str:
    """Create a run for a source and queue its listing; returns the run id."""
    run = fleet.runs.create(source_id, run_kind)
    fleet.redis.set(fleet._run_key(run.id, "source"), json.dumps({"kind": kind, "id": source_id, "options": options}),
                    ex=fleet.settings.visibility_timeout_seconds * 24)
    fleet.send(names.SYNC_SOURCE, [run.id])
    return run.id


def sync_source(fleet: Fleet, run_id: str) -> None:
    """List the source, skip what is unchanged by version, queue the rest, remember what vanished."""
    run = fleet.runs.get(run_id)
    if run is None or run.status.finished:
        return
    if fleet.redis.hexists(f"{_K}run:{run_id}", "sent"):
        # Redelivered after the listing was stored (its worker died before acknowledging):
        # listing again would reset the run's accounting under documents already in flight.
        fleet.send(names.FEED, [run_id])
        return
    fleet.runs.start(run_id)
    connector = fleet._connector(run_id)
    listed = {change.uri: change for change in connector.list_documents()}
    stored = fleet.store.documents(run.source_id)
    todo = []
    unchanged = 0
    for uri, change in listed.items():
        doc = stored.get(uri)
        if doc and doc.complete and doc.doc_version == change.version:
            unchanged += 1
        else:
            todo.append(json.dumps(change.to_json()))
    gone = [uri for uri in stored if uri not in listed]
    pipe = fleet.redis.pipeline()
    pipe.delete(fleet._run_key(run_id, "todo"), fleet._run_key(run_id, "gone"))
    if todo:
        pipe.rpush(fleet._run_key(run_id, "todo"), *todo)
    if gone:
        pipe.rpush(fleet._run_key(run_id, "gone"), *gone)
    pipe.hset(f"{_K}run:{run_id}", mapping={"scanned": len(listed), "unchanged": unchanged, "queued": len(todo),
                                            "sent": 0, "done": 0})
    pipe.execute()
    fleet.send(names.FEED, [run_id])


def feed(fleet: Fleet, run_id: str) -> None:
    """Keep at most `run_window` documents of this run in flight; finish the run when all are done."""
    run = fleet.runs.get(run_id)
    if run is None or run.status.finished:
        return
    state = {k.decode(): int(v) for k, v in fleet.redis.hgetall(f"{_K}run:{run_id}").items()
             if k.decode() in ("sent", "done", "queued")}
    room = fleet.settings.run_window - (state["sent"] - state["done"])
    if room > 0 and not fleet.runs.is_cancelled(run_id):
        batch = fleet.redis.lpop(fleet._run_key(run_id, "todo"), room) or []
        for raw in batch:
            fleet.redis.hincrby(f"{_K}run:{run_id}", "sent", 1)
            fleet.send(names.FETCH, [run_id, json.loads(raw)])
        state["sent"] += len(batch)
    if state["done"] >= state["queued"] and fleet.redis.llen(fleet._run_key(run_id, "todo")) == 0:
        _finish(fleet, run_id)
    else:
        fleet.send(names.FEED, [run_id], countdown=0.5)


def _finish(fleet: Fleet, run_id: str) -> None:
    """All documents are written: remove what vanished from the source, then close the run."""
    run = fleet.runs.get(run_id)
    gone = [uri.decode() for uri in fleet.redis.lrange(fleet._run_key(run_id, "gone"), 0, -1)]
    if gone and not run.status.finished:
        stored = fleet.store.documents(run.source_id, gone)
        for uri in gone:
            if uri in stored and fleet.runs.claim_document(run.source_id, uri, run.seq):
                fleet.store.delete(stored[uri].ids)
                fleet.runs.count(run_id, "deleted")
    fleet.redis.delete(fleet._run_key(run_id, "gone"), fleet._run_key(run_id, "todo"), fleet._run_key(run_id, "done"))
    fleet.runs.finish(run_id)


def fetch(fleet: Fleet, run_id: str, change_json: dict[str, Any]) -> None:
    """Read one document into the payload store and queue its parsing; skip it if nothing changed."""
    change = DocumentChange.from_json(change_json)
    run = fleet.runs.get(run_id)
    if run is None or fleet.runs.is_cancelled(run_id):
        if run:
            fleet._done(run_id, change.uri)
        return
    connector = fleet._connector(run_id)
    try:
        fetched = fetch_document(connector, change.uri, fleet.settings.max_document_bytes)
    except DocumentVanished:
        fleet._done(run_id, change.uri, "unchanged")  # the run's deletion pass or the next one removes it
        return
    except PermanentDocumentError as exc:
        fleet.runs.record_error(run_id, change.uri, str(exc))
        fleet._done(run_id, change.uri)
        return
    stored = fleet.store.documents(change.source_id, [change.uri]).get(change.uri)
    if stored and stored.complete and stored.doc_hash == fetched.doc_hash:
        touched = {keys.DOC_VERSION: change.version or fetched.doc_hash, "modified_time": fetched.modified_time}
        by_id = stored.by_id()
        fleet.store.update_metadata(list(by_id), [{**m, **touched} for m in by_id.values()])
        fleet._done(run_id, change.uri, "unchanged")
        return
    # The same content of the same document is worked on once, however often its change arrives.
    claim = f"{fleet.ns}claim:{change.source_id}:{change.uri}:{fetched.doc_hash}"
    if not fleet.redis.set(claim, run_id, nx=True, ex=fleet.settings.visibility_timeout_seconds):
        if (fleet.redis.get(claim) or b"").decode() != run_id:
            fleet._done(run_id, change.uri, "unchanged")
            return
    key = fleet.payloads.put_bytes("doc", fetched.data)
    facts = DocumentFacts(source_id=change.source_id, uri=change.uri, doc_version=change.version or fetched.doc_hash,
                          doc_hash=fetched.doc_hash, modified_time=fetched.modified_time or change.observed_at,
                          mime_type="", parser="")
    fleet.send(names.PARSE, [run_id, key, asdict(facts), claim])


def parse(fleet: Fleet, run_id: str, payload_key: str, facts_json: dict[str, Any], claim: str) -> None:
    """Parse, chunk and plan one document; reuse stored vectors; queue embedding of what is new."""
    data = fleet.payloads.get_bytes(payload_key)
    if data is None:  # Redis lost it (restart): the next reconciliation pass reads the document again
        fleet.runs.record_error(run_id, facts_json["uri"], "in-flight payload lost (Redis restarted); the next sync retries it")
        fleet._done(run_id, facts_json["uri"])
        return
    s = fleet.settings
    try:
        parsed = parse_document(facts_json["uri"], data)
        chunks = chunk_document(parsed, facts_json["uri"], s)
    except (SkippedDocument, PermanentDocumentError) as exc:
        if isinstance(exc, PermanentDocumentError):
            fleet.runs.record_error(run_id, facts_json["uri"], str(exc))
        fleet.redis.delete(claim)
        fleet.payloads.delete(payload_key)
        fleet._done(run_id, facts_json["uri"])
        return
    facts = DocumentFacts(**{**facts_json, "mime_type": parsed.mime_type, "parser": parsed.parser})
    stored = fleet.store.documents(facts.source_id, [facts.uri]).get(facts.uri)
    plan = plan_document(facts, chunks, stored)
    known = fleet.store.vectors_by_content_hash([r.metadata[keys.CONTENT_HASH] for r in plan.records])
    doc = {"run_id": run_id, "uri": facts.uri, "source_id": facts.source_id, "claim": claim,
           "records": [{"id": r.id, "text": r.text, "metadata": r.metadata,
                        "vectors": known.get(r.metadata[keys.CONTENT_HASH])} for r in plan.records],
           "updates": plan.updates, "stale": plan.stale}
    doc_key = fleet.payloads.put_json(f"plan:{run_id}:{uuid.uuid4().hex}", doc)
    fleet.payloads.delete(payload_key)
    if any(r["vectors"] is None for r in doc["records"]):
        fleet.send(names.EMBED_SPARSE, [doc_key])
        fleet.send(names.EMBED_DENSE, [doc_key])
    else:
        _ready(fleet, doc_key)


def embed(fleet: Fleet, doc_key: str, side: str) -> None:
    """Compute one side's vectors (dense or sparse) for a planned document, then join.

    Vectors go into the document's own payload (what flush reads) and into a shared cache by
    content hash, so a replayed or duplicated document is not embedded again.
    """
    doc = fleet.payloads.get_json(doc_key)
    if doc is None:
        return
    wanted = {r["metadata"][keys.CONTENT_HASH]: r["text"] for r in doc["records"] if r["vectors"] is None}
    cache = f"{fleet.ns}vec:{side}:"
    hashes = list(wanted)
    cached = dict(zip(hashes, fleet.redis.mget([cache + h for h in hashes]))) if hashes else {}
    missing = [h for h in hashes if cached[h] is None]
    if missing:
        texts = [wanted[h] for h in missing]
        if side == "dense":
            values = [json.dumps(v.tolist()) for v in fleet.dense.embed(texts)]
        else:
            values = [encode_sparse(i, v) for i, v in fleet.sparse.encode(texts)]
        cached.update(zip(missing, (v.encode() for v in values)))
        fleet.redis.incrby(f"{EMBEDDED_TEXTS}:{side}", len(texts))
    ttl = fleet.settings.visibility_timeout_seconds * 2
    pipe = fleet.redis.pipeline()
    for h in missing:
        pipe.set(cache + h, cached[h], ex=ttl)
    if cached:
        pipe.hset(f"{doc_key}:{side}", mapping=cached)
        pipe.expire(f"{doc_key}:{side}", ttl)
    # The join: whichever side finishes second marks the document ready (a set, so replays are harmless).
    pipe.sadd(doc_key + ":parts", side)
    pipe.expire(doc_key + ":parts", ttl)
    pipe.execute()
    if fleet.redis.scard(doc_key + ":parts") == 2:
        _ready(fleet, doc_key)


def embed_sparse(fleet: Fleet, doc_key: str) -> None:
    embed(fleet, doc_key, "sparse")


def embed_dense(fleet: Fleet, doc_key: str) -> None:
    embed(fleet, doc_key, "dense")


def _ready(fleet: Fleet, doc_key: str) -> None:
    """Add a document to the upsert batch; flush now if the batch is full, else within flush_delay."""
    fleet.redis.sadd(fleet.ready, doc_key)
    if fleet.redis.scard(fleet.ready) >= fleet.store.batch_limit // 8:
        fleet.send(names.FLUSH, [])
    elif fleet.redis.set(fleet.flush_scheduled, 1, nx=True, px=int(fleet.settings.flush_delay_seconds * 1000)):
        fleet.send(names.FLUSH, [], countdown=fleet.settings.flush_delay_seconds)


def flush(fleet: Fleet) -> None:
    """Write a batch of ready documents to Chroma, across documents, bounded by the store's limit."""
    _reclaim_expired(fleet)
    token = uuid.uuid4().hex
    inflight = f"{fleet.ns}inflight:{token}"
    fleet.redis.zadd(fleet.leases, {token: time.time()})
    docs: list[tuple[str, dict[str, Any]]] = []
    records = 0
    while records < fleet.store.batch_limit:
        doc_key = fleet.redis.spop(fleet.ready)
        if doc_key is None:
            break
        doc_key = doc_key.decode()
        fleet.redis.sadd(inflight, doc_key)
        doc = fleet.payloads.get_json(doc_key)
        if doc is not None:
            docs.append((doc_key, doc))
            records += len(doc["records"])
    try:
        docs = _write(fleet, docs)
    except Exception:
        # Put the batch back for the retry (or the next flush) before giving up this attempt.
        fleet.redis.sunionstore(fleet.ready, [fleet.ready, inflight])
        fleet.redis.delete(inflight)
        fleet.redis.zrem(fleet.leases, token)
        raise
    for doc_key, doc in docs:
        fleet._done(doc["run_id"], doc["uri"], "indexed")
        fleet.redis.delete(doc["claim"])
        fleet.payloads.delete(doc_key, doc_key + ":parts", doc_key + ":dense", doc_key + ":sparse")
    fleet.redis.delete(inflight)
    fleet.redis.zrem(fleet.leases, token)
    if fleet.redis.scard(fleet.ready):
        fleet.send(names.FLUSH, [])


def _write(fleet: Fleet, docs: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """Write the batch; returns the documents written (or skipped as superseded)."""
    writer = BatchWriter(fleet.store)
    written = []
    for doc_key, doc in docs:
        run = fleet.runs.get(doc["run_id"])
        if run is not None and not fleet.runs.claim_document(doc["source_id"], doc["uri"], run.seq):
            written.append((doc_key, doc))  # a newer run already wrote this document
            continue
        dense = {k.decode(): v for k, v in fleet.redis.hgetall(f"{doc_key}:dense").items()}
        sparse = {k.decode(): v for k, v in fleet.redis.hgetall(f"{doc_key}:sparse").items()}
        out = []
        for r in doc["records"]:
            h = r["metadata"][keys.CONTENT_HASH]
            if r["vectors"] is not None:
                embedding, sparse_vector = r["vectors"]
            elif h in dense and h in sparse:
                embedding, sparse_vector = json.loads(dense[h]), sparse[h].decode()
            else:
                break
            out.append(ChunkRecord(r["id"], r["text"], {**r["metadata"], keys.SPARSE: sparse_vector},
                                   [float(x) for x in embedding]))
        else:
            writer.upsert(out)
            for record_id, metadata in doc["updates"].items():
                writer.update(record_id, metadata)
            writer.delete(doc["stale"])
            written.append((doc_key, doc))
            continue
        # Its vectors expired (a long outage): embed this document again rather than hold up the batch.
        log.warning("vectors of %s expired before it was written; embedding it again", doc["uri"])
        fleet.redis.delete(doc_key + ":parts")
        fleet.send(names.EMBED_SPARSE, [doc_key])
        fleet.send(names.EMBED_DENSE, [doc_key])
    writer.flush()
    return written


def _reclaim_expired(fleet: Fleet) -> None:
    """Batches whose flushing worker died go back to the ready set."""
    cutoff = time.time() - fleet.settings.flush_lease_seconds
    for token in fleet.redis.zrangebyscore(fleet.leases, "-inf", cutoff):
        token = token.decode()
        inflight = f"{fleet.ns}inflight:{token}"
        fleet.redis.sunionstore(fleet.ready, [fleet.ready, inflight])
        fleet.redis.delete(inflight)
        fleet.redis.zrem(fleet.leases, token)


__all__ = ["Fleet", "enqueue_sync", "sync_source", "feed", "fetch", "parse", "embed", "flush", "Op"]

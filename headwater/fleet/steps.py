"""The fleet's steps: each takes its lease, does its work, commits one transition, then sends what comes next.

    list ─▶ fetch ─▶ parse ─▶ dense ∥ sparse ─▶ write (flush, batched across documents) ─▶ finish

A step's output (payload, plan, vectors) is written under keys derived from (run, uri), so a step
run again overwrites what a lost run of it left. The commit is one Lua script; the next step's
task is sent after it; a step deletes its input only after the next step is queued. A crash
between any two of these leaves a lease that the sweeper re-drives (headwater.fleet.state).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict

from headwater import chroma_store as ckeys
from headwater import outcomes
from headwater.deletion_guard import check_deletions, likely_deletions
from headwater.document_plan import DocumentFacts, plan_document, unchanged_by_version
from headwater.errors import (ConfigurationError, DocumentVanished, ListingError, PermanentDocumentError,
                              RunDataMissing, SkippedDocument)
from headwater.fleet import keys
from headwater.fleet.context import Fleet
from headwater.fleet.state import DENSE, FETCH, FINISH, LIST, PARSE, SPARSE, WRITE, Moved
from headwater.models import Op
from headwater.sparse_codec import encode_sparse
from workers import names
from workers.chunk import chunk_document
from workers.fetch import fetch_document
from workers.parse import parse_document
from workers.upsert import BatchWriter

log = logging.getLogger(__name__)

TASK_OF_STEP = {LIST: names.LIST_SOURCE, FETCH: names.FETCH, PARSE: names.PARSE, DENSE: names.EMBED_DENSE,
                SPARSE: names.EMBED_SPARSE, WRITE: names.FLUSH, FINISH: names.FINISH}
WRITE_BATCH_DOCUMENTS = 64  # documents per write batch; the store splits records to its own limit
CLAIM_WAIT_SECONDS = 1.0  # how soon a document another run has in flight is looked at again
_PAYLOAD_PARTS = ("bytes", "facts", "plan", DENSE, SPARSE)


class Held:
    """A step this process holds the lease of."""

    def __init__(self, fleet: Fleet, run_id: str, step: str, uri: str, token: str) -> None:
        self.fleet, self.run_id, self.step, self.uri, self.token = fleet, run_id, step, uri, token

    def commit(self, next_state: str, next_steps: tuple[str, ...] = (), siblings: tuple[str, ...] = (),
               reason: str = "") -> Moved:
        return self.fleet.state.commit(self.run_id, self.step, self.uri, self.token, next_state, next_steps,
                                       siblings, reason)


def run_step(fleet: Fleet, run_id: str, step: str, uri: str, body: Callable[[Held], None]) -> None:
    """Acquire the step's lease, run `body` while renewing it, and turn any error into its transition."""
    token = fleet.new_token()
    got = fleet.state.acquire(run_id, step, uri, token)
    if got.status == "poisoned":
        follow(fleet, run_id, got)
    if got.status != "ok":
        log.debug("%s of %s in run %s: %s", step, uri or "(run)", run_id, got.status)
        return
    held = Held(fleet, run_id, step, uri, token)
    try:
        with fleet.renewing([keys.member(run_id, step, uri)], token):
            body(held)
    except (PermanentDocumentError, ConfigurationError, ListingError, RunDataMissing) as exc:
        _end_failed(held, str(exc))
    except Exception as exc:  # noqa: BLE001  (anything else is worth a retry: Chroma, Redis or the source blinked)
        _retry_later(held, exc)


def _end_failed(held: Held, reason: str) -> None:
    fleet = held.fleet
    if held.uri == "":  # the run itself cannot go on: nothing is deleted
        fleet.runs.fail_run(held.run_id, reason)
        fleet.redis.zrem(keys.LEASES, keys.member(held.run_id, held.step))
        return
    follow(fleet, held.run_id, held.commit(outcomes.FAILED, reason=reason))


def _retry_later(held: Held, exc: Exception) -> None:
    fleet = held.fleet
    attempts = int(fleet.redis.hget(keys.ATTEMPTS, keys.member(held.run_id, held.step, held.uri)) or 0)
    delay = fleet.backoff(attempts + 1)
    reason = f"gave up after {fleet.settings.task_max_retries} retries at its {held.step} step: {type(exc).__name__}"
    log.warning("%s of %s in run %s failed (%s: %s); retry in %.0fs", held.step, held.uri or "(run)",
                held.run_id, type(exc).__name__, exc, delay)
    moved = fleet.state.fail_attempt(held.run_id, held.step, held.uri, held.token, delay, reason)
    if moved.status == "retry":
        fleet.send(TASK_OF_STEP[held.step], [held.run_id] + ([held.uri] if held.uri else []), countdown=delay)
    else:
        follow(fleet, held.run_id, moved)


def follow(fleet: Fleet, run_id: str, moved: Moved) -> None:
    """Send what a transition made due: fetches of admitted documents, the run's finish."""
    if moved.admitted:
        fleet.crash.reached("admit.after_pop")
    for uri in moved.admitted:
        fleet.send(names.FETCH, [run_id, uri])
    if moved.finish_due:
        fleet.send(names.FINISH, [run_id])


def schedule_flush(fleet: Fleet, collection: str) -> None:
    """Write soon: now when a batch is full, else within flush_delay (one scheduled flush at a time)."""
    if fleet.redis.scard(keys.ready(collection)) >= WRITE_BATCH_DOCUMENTS:
        fleet.send(names.FLUSH, [collection])
    elif fleet.redis.set(keys.flush_scheduled(collection), 1, nx=True,
                         px=int(fleet.settings.flush_delay_seconds * 1000)):
        fleet.send(names.FLUSH, [collection], countdown=fleet.settings.flush_delay_seconds)


def _to_write_or_end(held: Held, outcome: outcomes.Outcome, collection: str) -> None:
    """An outcome with writes goes to the write batch; one without ends the document here."""
    fleet = held.fleet
    if outcome.writes:
        fleet.payloads.put_json(keys.doc_payload(held.run_id, held.uri, "plan"), outcome.to_json())
        if held.commit("write", (WRITE,)).status == "next":
            schedule_flush(fleet, collection)
        return
    follow(fleet, held.run_id, held.commit(outcome.state, reason=outcome.reason))


# list ---------------------------------------------------------------------------------------

def list_source(fleet: Fleet, run_id: str) -> None:
    """List the source (a full run), store the run's documents, then admit the first window of them."""
    def body(held: Held) -> None:
        run = fleet.runs.get(run_id)
        fleet.runs.start(run_id)
        if run.kind == "full":
            _store_listing(fleet, run)
            fleet.crash.reached("list.after_store")
        moved = fleet.state.listed(run_id, held.token)
        fleet.crash.reached("list.after_commit")
        follow(fleet, run_id, moved)

    run_step(fleet, run_id, LIST, "", body)


def _store_listing(fleet: Fleet, run) -> None:  # noqa: ANN001
    """Stream the listing against the manifest: an unchanged document costs its uri, only changed ones are held."""
    connector = fleet.connector(run.id)
    stored = fleet.store(run.target).documents(run.source_id, backfill=True)
    skipped = {k.decode(): v.decode() for k, v in fleet.redis.hgetall(keys.source(run.source_id, "skipped")).items()}
    listed: set[str] = set()
    todo, unchanged = [], []
    for change in connector.list_documents():  # a ListingError fails the run
        listed.add(change.uri)
        doc = stored.get(change.uri)
        if unchanged_by_version(doc, change) or (doc is None and change.version and skipped.get(change.uri) == change.version):
            unchanged.append(change.uri)
        else:
            todo.append(change)
    gone = [uri for uri in stored if uri not in listed]
    check_deletions(run.source_id, len(stored), likely_deletions(stored, listed, todo), len(listed),
                    run.allow_mass_delete)
    fleet.runs.store_listing(run.id, todo, unchanged, gone, scanned=len(listed))


# fetch --------------------------------------------------------------------------------------

def fetch(fleet: Fleet, run_id: str, uri: str) -> None:
    """Read one document into the payload store; skip it when its bytes are what the collection holds."""
    def body(held: Held) -> None:
        run = fleet.runs.get(run_id)
        change = fleet.runs.change(run_id, uri)
        claim = keys.document_claim(run.target.collection, run.source_id, uri)
        if not fleet.state.claim_document(run_id, uri, claim, fleet.settings.payload_ttl_seconds):
            # Another run has this document in flight: wait for it to end, then decide from what it
            # wrote (deciding now, from what the collection held before, could undo its write).
            if fleet.state.defer(run_id, FETCH, uri, held.token, CLAIM_WAIT_SECONDS):
                fleet.send(names.FETCH, [run_id, uri], countdown=CLAIM_WAIT_SECONDS)
            return
        stored = fleet.store(run.target).documents(run.source_id, [uri]).get(uri)
        if change.op is Op.DELETE:
            _to_write_or_end(held, outcomes.removed(run.source_id, uri, stored, outcomes.DELETED),
                             run.target.collection)
            return
        try:
            fetched = fetch_document(fleet.connector(run_id), uri, fleet.settings.max_document_bytes)
        except DocumentVanished:
            _to_write_or_end(held, outcomes.removed(run.source_id, uri, stored, outcomes.DELETED),
                             run.target.collection)
            return
        version = fetched.version or change.version or fetched.doc_hash
        modified_time = fetched.modified_time or change.observed_at
        if stored and stored.complete and stored.doc_hash == fetched.doc_hash:
            _to_write_or_end(held, outcomes.touched(run.source_id, stored, version, modified_time),
                             run.target.collection)
            return
        fleet.payloads.put_bytes(keys.doc_payload(run_id, uri, "bytes"), fetched.data)
        facts = DocumentFacts(source_id=run.source_id, uri=uri, doc_version=version, doc_hash=fetched.doc_hash,
                              modified_time=modified_time, mime_type="", parser="")
        fleet.payloads.put_json(keys.doc_payload(run_id, uri, "facts"), asdict(facts))
        fleet.crash.reached("fetch.after_payload", uri)
        moved = held.commit("parse", (PARSE,))
        fleet.crash.reached("fetch.after_commit", uri)
        if moved.status == "next":
            fleet.send(names.PARSE, [run_id, uri])

    run_step(fleet, run_id, FETCH, uri, body)


# parse --------------------------------------------------------------------------------------

def parse(fleet: Fleet, run_id: str, uri: str) -> None:
    """Parse, chunk and plan one document; reuse stored vectors; queue embedding of what is new."""
    def body(held: Held) -> None:
        run = fleet.runs.get(run_id)
        data = fleet.payloads.get_bytes(keys.doc_payload(run_id, uri, "bytes"))
        facts_json = fleet.payloads.get_json(keys.doc_payload(run_id, uri, "facts"))
        if data is None or facts_json is None:
            raise PermanentDocumentError("its in-flight copy was lost (Redis emptied or the run outlived "
                                         "HEADWATER_PAYLOAD_TTL_SECONDS); the next sync reads it again")
        store = fleet.store(run.target)
        stored = store.document_chunks(run.source_id, [uri]).get(uri)  # planning needs the chunks' metadata
        s = fleet.settings
        try:
            parsed = parse_document(uri, data)
            chunks = chunk_document(parsed, uri, s)
        except SkippedDocument as exc:
            fleet.redis.hset(keys.source(run.source_id, "skipped"), uri, facts_json["doc_version"])
            if stored is None:  # an entry a cut-short write left still has to go
                stored = store.documents(run.source_id, [uri]).get(uri)
            _to_write_or_end(held, outcomes.removed(run.source_id, uri, stored, outcomes.SKIPPED, str(exc)),
                             run.target.collection)
            _drop_payload(fleet, run_id, uri, "bytes")
            return
        facts = DocumentFacts(**{**facts_json, "mime_type": parsed.mime_type, "parser": parsed.parser})
        plan = plan_document(facts, chunks, stored)
        known = store.vectors_by_content_hash([r.metadata[ckeys.CONTENT_HASH] for r in plan.records])
        for record in plan.records:
            if record.metadata[ckeys.CONTENT_HASH] in known:
                record.embedding, record.metadata[ckeys.SPARSE] = known[record.metadata[ckeys.CONTENT_HASH]]
        outcome = outcomes.indexed(plan)
        if all(r.embedding is not None for r in plan.records):
            _to_write_or_end(held, outcome, run.target.collection)
            _drop_payload(fleet, run_id, uri, "bytes")
            return
        fleet.payloads.put_json(keys.doc_payload(run_id, uri, "plan"), outcome.to_json())
        fleet.crash.reached("parse.after_plan", uri)
        moved = held.commit("embed", (DENSE, SPARSE))
        fleet.crash.reached("parse.after_commit", uri)
        if moved.status == "next":
            fleet.send(names.EMBED_SPARSE, [run_id, uri])
            fleet.send(names.EMBED_DENSE, [run_id, uri])
        fleet.crash.reached("parse.after_send", uri)
        _drop_payload(fleet, run_id, uri, "bytes")
        fleet.crash.reached("parse.after_payload_delete", uri)

    run_step(fleet, run_id, PARSE, uri, body)


def _drop_payload(fleet: Fleet, run_id: str, uri: str, *parts: str) -> None:
    fleet.payloads.delete(*(keys.doc_payload(run_id, uri, part) for part in parts))


# embed --------------------------------------------------------------------------------------

def embed(fleet: Fleet, run_id: str, uri: str, side: str) -> None:
    """One side's vectors (dense or sparse) for a planned document's new chunks, then the join."""
    def body(held: Held) -> None:
        run = fleet.runs.get(run_id)
        fleet.check_models(run, side)
        plan = fleet.payloads.get_json(keys.doc_payload(run_id, uri, "plan"))
        if plan is None:
            raise PermanentDocumentError("its in-flight plan was lost (Redis emptied or the run outlived "
                                         "HEADWATER_PAYLOAD_TTL_SECONDS); the next sync reads it again")
        wanted = {r["metadata"][ckeys.CONTENT_HASH]: r["text"] for r in plan["upserts"] if r["embedding"] is None}
        model = run.target.dense_model if side == DENSE else run.target.sparse_model
        hashes = list(wanted)
        cache_keys = [keys.vector_cache(model, h) for h in hashes]
        values = dict(zip(hashes, fleet.redis.mget(cache_keys))) if hashes else {}
        missing = [h for h in hashes if values[h] is None]
        if missing:
            texts = [wanted[h] for h in missing]
            if side == DENSE:
                computed = [json_vector(v) for v in fleet.dense.embed(texts)]
            else:
                computed = [encode_sparse(i, v) for i, v in fleet.sparse.encode(texts)]
            values.update(zip(missing, (v.encode() for v in computed)))
            fleet.redis.incrby(f"{keys.EMBEDDED_TEXTS}:{side}", len(texts))
        pipe = fleet.redis.pipeline()
        for h in missing:
            pipe.set(keys.vector_cache(model, h), values[h], ex=fleet.settings.payload_ttl_seconds)
        pipe.execute()
        fleet.payloads.put_hash(keys.doc_payload(run_id, uri, side), values)
        fleet.crash.reached(f"{side}.after_vectors", uri)
        moved = held.commit("write", (WRITE,), siblings=(SPARSE if side == DENSE else DENSE,))
        fleet.crash.reached(f"{side}.after_commit", uri)
        if moved.status == "next":
            schedule_flush(fleet, run.target.collection)

    run_step(fleet, run_id, side, uri, body)


def json_vector(vector) -> str:  # noqa: ANN001
    return json.dumps([float(x) for x in vector])


def embed_dense(fleet: Fleet, run_id: str, uri: str) -> None:
    embed(fleet, run_id, uri, DENSE)


def embed_sparse(fleet: Fleet, run_id: str, uri: str) -> None:
    embed(fleet, run_id, uri, SPARSE)


# write --------------------------------------------------------------------------------------

def flush(fleet: Fleet, collection: str) -> None:
    """Write a batch of ready documents of one collection to Chroma, then end them."""
    token = fleet.new_token()
    taken, poisoned = fleet.state.take_batch(collection, token, WRITE_BATCH_DOCUMENTS)
    for moved in poisoned:
        follow(fleet, moved.detail, moved)
    if not taken:
        return
    members = [keys.member(run_id, WRITE, uri) for run_id, uri in taken]
    ends: list[tuple[str, str, str, str]] = []  # run, uri, terminal state, reason
    try:
        with fleet.renewing(members, token):
            fleet.crash.reached("flush.after_take")
            writer: BatchWriter | None = None
            for run_id, uri in taken:
                run = fleet.runs.get(run_id)
                if writer is None:
                    writer = BatchWriter(fleet.store(run.target),
                                         after_chunks=lambda: fleet.crash.reached("flush.after_chunks"))
                ends.append((run_id, uri, *_queue_writes(fleet, writer, run, uri)))
            writer.flush()
            fleet.crash.reached("flush.after_write")
    except Exception as exc:  # noqa: BLE001  (Chroma unavailable: the batch is retried, then its documents fail)
        _retry_batch(fleet, collection, taken, token, exc)
        return
    for run_id, uri, state, reason in ends:
        follow(fleet, run_id, fleet.state.commit(run_id, WRITE, uri, token, state, reason=reason))
        _drop_payload(fleet, run_id, uri, *_PAYLOAD_PARTS)
    fleet.crash.reached("flush.after_commit")
    if fleet.redis.scard(keys.ready(collection)):
        fleet.send(names.FLUSH, [collection])


def _queue_writes(fleet: Fleet, writer: BatchWriter, run, uri: str) -> tuple[str, str]:  # noqa: ANN001
    """Put one document's writes on the batch; returns the state it ends in and why."""
    plan = fleet.payloads.get_json(keys.doc_payload(run.id, uri, "plan"))
    if plan is None:
        return outcomes.FAILED, "its in-flight plan was lost before it was written; the next sync reads it again"
    outcome = outcomes.Outcome.from_json(plan)
    dense = fleet.payloads.get_hash(keys.doc_payload(run.id, uri, DENSE))
    sparse = fleet.payloads.get_hash(keys.doc_payload(run.id, uri, SPARSE))
    for record in outcome.upserts:
        if record.embedding is None:
            h = record.metadata[ckeys.CONTENT_HASH]
            if h not in dense or h not in sparse:
                return outcomes.FAILED, "its vectors were lost before it was written; the next sync reads it again"
            record.embedding = [float(x) for x in json.loads(dense[h])]
            record.metadata[ckeys.SPARSE] = sparse[h].decode()
    newer = not fleet.runs.claim_document(run.source_id, uri, run.seq)
    if not newer and run.kind == "live":
        newer = not fleet.runs.claim_order(run.source_id, fleet.runs.change(run.id, uri))
    if newer:  # a newer run or a newer live change already owns this document
        return outcomes.UNCHANGED, ""
    outcomes.write_outcome(writer, outcome)
    return outcome.state, outcome.reason


def _retry_batch(fleet: Fleet, collection: str, taken: list[tuple[str, str]], token: str, exc: Exception) -> None:
    attempts = max(int(fleet.redis.hget(keys.ATTEMPTS, keys.member(r, WRITE, u)) or 0) for r, u in taken)
    delay = fleet.backoff(attempts + 1)
    reason = (f"gave up after {fleet.settings.task_max_retries} retries writing to Chroma: {type(exc).__name__}; "
              "check the Chroma server, then `headwater retry RUN`")
    log.warning("writing %d documents to %s failed (%s: %s); retry in %.0fs", len(taken), collection,
                type(exc).__name__, exc, delay)
    for run_id, uri in taken:
        moved = fleet.state.fail_attempt(run_id, WRITE, uri, token, delay, reason)
        if moved.status == "retry":
            fleet.redis.sadd(keys.ready(collection), keys.ready_entry(run_id, uri))
        else:
            follow(fleet, run_id, moved)
    fleet.send(names.FLUSH, [collection], countdown=delay)


# finish -------------------------------------------------------------------------------------

def finish(fleet: Fleet, run_id: str) -> None:
    """Every document is terminal: remove what the listing no longer has, close the run, drop its payloads."""
    def body(held: Held) -> None:
        run = fleet.runs.get(run_id)
        gone = fleet.runs.gone(run_id)
        if gone:
            store = fleet.store(run.target)
            stored = store.documents(run.source_id, gone)
            writer = BatchWriter(store)
            for uri in gone:
                if uri in stored and fleet.runs.claim_document(run.source_id, uri, run.seq):
                    outcomes.write_outcome(writer, outcomes.removed(run.source_id, uri, stored[uri], outcomes.DELETED))
            writer.flush()
            fleet.crash.reached("finish.after_delete")
            fleet.runs.mark_deleted(run_id, gone)
        fleet.state.close(run_id, held.token)
        pipe = fleet.redis.pipeline()
        for uri in fleet.runs.states(run_id):
            pipe.delete(*(keys.doc_payload(run_id, uri, part) for part in _PAYLOAD_PARTS))
        pipe.execute()

    run_step(fleet, run_id, FINISH, "", body)


# sweep --------------------------------------------------------------------------------------

def sweep(fleet: Fleet) -> int:
    """Re-drive every lease whose deadline passed (its holder is gone, or its message was lost)."""
    token = fleet.new_token()
    hold_ms = int(max(fleet.settings.sweep_interval_seconds, 5) * 1000)
    if not fleet.redis.set(keys.SWEEP_LOCK, token, nx=True, px=hold_ms):
        return 0  # another sweep is running: sweeps never overlap
    redriven = 0
    try:
        for lease in fleet.state.expired():
            if fleet.state.redrive(lease, fleet.settings.redrive_after_seconds) != 1:
                continue
            run_id, step, uri = keys.split_member(lease)
            if step == WRITE:
                collection = (fleet.redis.hget(keys.run(run_id), "collection") or b"").decode()
                fleet.send(names.FLUSH, [collection])
            else:
                fleet.send(TASK_OF_STEP[step], [run_id] + ([uri] if uri else []))
            redriven += 1
    finally:
        if (fleet.redis.get(keys.SWEEP_LOCK) or b"").decode() == token:
            fleet.redis.delete(keys.SWEEP_LOCK)
    if redriven:
        log.info("sweeper re-drove %d steps whose leases expired", redriven)
    return redriven


__all__ = ["list_source", "fetch", "parse", "embed_dense", "embed_sparse", "flush", "finish", "sweep", "follow",
           "schedule_flush", "TASK_OF_STEP"]

"""The fleet's steps: each takes its lease, does its work, commits one transition, then sends what comes next.

    list ─▶ fetch ─▶ parse ─▶ dense ∥ sparse ─▶ write ─▶ finish
            (one task per document)  (batched across documents: headwater.fleet.batches)

A fetch that commits goes straight on to its document's parse in the same task (the parse step
keeps its own lease, so a parse lost after the fetch is re-driven like any other step); the
embedding sides and the write take batches of many documents' work.

A step's output (payload, plan, vectors) is written under keys derived from (run, uri), so a step
run again overwrites what a lost run of it left. The commit is one Lua script; the next step's
task is sent after it; a step deletes its input only after the next step is queued. A crash
between any two of these leaves a lease that the sweeper re-drives (headwater.fleet.state).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from time import perf_counter, thread_time
from typing import Any

from connectors.base import Closeable, Discoverer
from headwater.store import chroma_store as ckeys
from headwater.pipeline import decisions, discovery, outcomes
from headwater.pipeline.deletion_guard import check_deletions, likely_deletions
from headwater.pipeline.document_plan import DocumentFacts, plan_document
from headwater.errors import (PROGRAMMING_ERRORS, ConfigurationError, DocumentUnchanged, DocumentVanished,
                              ListingError, PermanentDocumentError, RunDataMissing, SkippedDocument)
from headwater.fleet import batches, keys
from headwater.fleet.batches import BATCH_TASK, Batch
from headwater.fleet.context import Fleet
from headwater.fleet.payloads import pack_dense, unpack_dense
from headwater.fleet.worker_registry import WorkerRegistry
from headwater.fleet.state import BATCHED_STEPS, DENSE, FETCH, FINISH, LIST, PARSE, SPARSE, WRITE, Commit, Moved
from headwater.models import DocumentChange, Op
from headwater.observability import metrics
from headwater.store.sparse_codec import encode_sparse
from headwater import queues as names
from headwater.pipeline.chunk import chunk_document
from headwater.pipeline.embed_endpoint import EndpointRejected
from headwater.pipeline.fetch import fetch_document
from headwater.pipeline.parse import parse_document
from headwater.pipeline.write import BatchWriter
from headwater.redis_connection import release_quietly

log = logging.getLogger(__name__)

TASK_OF_STEP = {LIST: names.LIST_SOURCE, FETCH: names.FETCH, PARSE: names.PARSE, FINISH: names.FINISH, **BATCH_TASK}
CLAIM_WAIT_SECONDS = 1.0  # how soon a document another run has in flight is looked at again
_PAYLOAD_PARTS = ("bytes", "facts", "plan", DENSE, SPARSE)


class Held:
    """A step this process holds the lease of."""

    def __init__(self, fleet: Fleet, run_id: str, step: str, uri: str, token: str) -> None:
        self.fleet, self.run_id, self.step, self.uri, self.token = fleet, run_id, step, uri, token

    def commit(self, next_state: str, next_steps: tuple[str, ...] = (), siblings: tuple[str, ...] = (),
               reason: str = "", weight: int = 1) -> Moved:
        metrics.document_moved(self.step, next_state)
        return self.fleet.state.commit(self.run_id, self.step, self.uri, self.token, next_state, next_steps,
                                       siblings, reason, weight)


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
    started, cpu_started = perf_counter(), thread_time()
    try:
        with fleet.renewing([keys.member(run_id, step, uri)], token):
            body(held)
    except (PermanentDocumentError, ConfigurationError, ListingError, RunDataMissing) as exc:
        metrics.FAILURES.labels(step, type(exc).__name__).inc()
        _end_failed(held, str(exc))
    except PROGRAMMING_ERRORS as exc:
        metrics.FAILURES.labels(step, type(exc).__name__).inc()
        # The traceback goes to the worker's log; the document's reason names the step and the error
        # class only (a message may quote the document's data).
        log.exception("%s of %s in run %s raised %s, a programming error: failed without retries",
                      step, uri or "(run)", run_id, type(exc).__name__)
        _end_failed(held, f"a programming error at its {step} step ({type(exc).__name__}; the worker's log has "
                          f"the traceback): retrying would raise it again. Report it, and after the fix "
                          f"`headwater retry RUN`")
    except Exception as exc:  # noqa: BLE001  (anything else is worth a retry: Chroma, Redis or the source blinked)
        metrics.RETRIES.labels(step, type(exc).__name__).inc()
        _retry_later(held, exc)
    fleet.costs.add(step, perf_counter() - started, 1 if uri else 0, thread_time() - cpu_started)


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


def _to_write_or_end(held: Held, outcome: outcomes.Outcome, collection: str) -> None:
    """An outcome with writes goes to the write batch; one without ends the document here."""
    fleet = held.fleet
    if outcome.writes:
        fleet.payloads.put_json(keys.doc_payload(held.run_id, held.uri, "plan"), outcome.to_json())
        if held.commit("write", (WRITE,)).status == "next":
            batches.schedule(fleet, collection, WRITE, [held.run_id], urgent=_is_live(fleet, held.run_id))
        return
    follow(fleet, held.run_id, held.commit(outcome.state, reason=outcome.reason))


def _is_live(fleet: Fleet, run_id: str) -> bool:
    """Whether a run carries live changes (someone waits for them: their writes are not held back)."""
    try:
        return fleet.run(run_id).kind == "live"
    except RunDataMissing:
        return False


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
    if isinstance(connector, Discoverer):
        # Only the seeds are known now (admitted as embedded mode admits them: headwater.pipeline.discovery);
        # each fetch adds what its page leads to, and finish decides what the run never reached means.
        frontier = discovery.Frontier(connector.max_pages)
        seeds = [DocumentChange(run.source_id, url, Op.UPSERT) for url in discovery.seeds(*connector.seed_urls())
                 if discovery.admit(url, 0, connector.max_depth, connector.refusal) is None and frontier.take(url, 0)]
        fleet.runs.store_listing(run.id, seeds, [], list(stored), scanned=len(seeds), truncated=frontier.truncated)
        return
    skipped = {k.decode(): v.decode() for k, v in fleet.redis.hgetall(keys.source(run.source_id, "skipped")).items()}
    diff = decisions.diff_listing(connector.list_documents(), stored, skipped)  # a ListingError fails the run
    diff.todo.sort(key=largest_first)
    check_deletions(run.source_id, len(stored), likely_deletions(stored, diff.listed, diff.todo), len(diff.listed),
                    run.allow_mass_delete)
    fleet.runs.store_listing(run.id, diff.todo, diff.unchanged, diff.gone, scanned=len(diff.listed))


def largest_first(change: DocumentChange) -> int:
    """Admission order of a full run's documents: largest first, listing order among equals and unknowns.

    Workers take documents one at a time, and a document's chunks are embedded by one worker per
    side, so a large document admitted last leaves the other workers idle while it finishes. Started
    first, its long steps overlap the many short ones (longest-processing-time-first scheduling).
    """
    return -(change.size or 0)


# fetch --------------------------------------------------------------------------------------

@dataclass
class _Fetched:
    """What a fetch hands to the parse of the same document in the same task (no second read)."""

    data: bytes
    facts: dict[str, Any]
    stored: bool  # whether the collection held the document when the fetch looked (under this run's claim)


def fetch(fleet: Fleet, run_id: str, uri: str) -> None:
    """Read one document into the payload store, skip it when its bytes are what the collection holds, else parse it."""
    handed: list[_Fetched] = []

    def body(held: Held) -> None:
        run = fleet.run(run_id)
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
            _end_deleted(held, run, stored)
            return
        connector = fleet.connector(run_id)
        try:
            fetched = fetch_document(connector, uri, fleet.settings.max_document_bytes,
                                     known_version=decisions.known_version(stored))
        except Exception as exc:  # noqa: BLE001  (ended below, after the links it found joined the run)
            fetched, failure = None, exc
        else:
            failure = None
        if isinstance(connector, Discoverer):
            # A crawled source found links while reading: those discovery admits join the run before
            # this document ends, so the run cannot finish before them.
            _discover(fleet, run, held, connector, uri)
        if isinstance(connector, Closeable):
            connector.close()  # its HTTP connections and spooled bodies; the bytes were read
        if isinstance(failure, DocumentUnchanged):  # the source said so without sending the bytes (an HTTP 304)
            follow(fleet, run_id, held.commit(outcomes.UNCHANGED))
            return
        if isinstance(failure, DocumentVanished) and isinstance(connector, Discoverer):
            # A crawled page fetched before that now answers 404/410 is deleted (discovery.deletions); embedded
            # mode's crawl leaves it out of the listing, to the same end.
            _end_deleted(held, run, stored)
            return
        if isinstance(failure, (DocumentVanished, SkippedDocument)):
            # Gone before it could be read, or declined by its connector: skipped with the reason, its old
            # chunks removed, as embedded mode reports it (SyncEngine._read_one).
            _to_write_or_end(held, outcomes.removed(run.source_id, uri, stored, outcomes.SKIPPED, str(failure)),
                             run.target.collection)
            return
        if failure is not None:
            raise failure
        version = decisions.document_version(fetched, change)
        modified_time = decisions.modified_time(fetched, change)
        if decisions.is_touch(stored, fetched):
            _to_write_or_end(held, outcomes.touched(run.source_id, stored, version, modified_time),
                             run.target.collection)
            return
        # Stored before the commit: a parse re-driven after this task dies reads them from here.
        fleet.payloads.put_bytes(keys.doc_payload(run_id, uri, "bytes"), fetched.data)
        facts = asdict(DocumentFacts(source_id=run.source_id, uri=uri, doc_version=version, doc_hash=fetched.doc_hash,
                                     modified_time=modified_time, mime_type=fetched.mime_type or "", parser="",
                                     url=fetched.url, metadata=fetched.metadata))
        fleet.payloads.put_json(keys.doc_payload(run_id, uri, "facts"), facts)
        fleet.crash.reached("fetch.after_payload", uri)
        moved = held.commit("parse", (PARSE,))
        fleet.crash.reached("fetch.after_commit", uri)
        if moved.status == "next":
            handed.append(_Fetched(fetched.data, facts, stored is not None))

    run_step(fleet, run_id, FETCH, uri, body)
    if handed:
        parse(fleet, run_id, uri, handed[0])


# parse --------------------------------------------------------------------------------------

def parse(fleet: Fleet, run_id: str, uri: str, fetched: _Fetched | None = None) -> None:
    """Parse, chunk and plan one document; reuse stored vectors; queue the embedding of what is new."""
    def body(held: Held) -> None:
        run = fleet.run(run_id)
        store = fleet.store(run.target)
        if fetched is not None:
            data, facts_json = fetched.data, fetched.facts
        else:  # re-driven on its own: read what the fetch stored
            data = fleet.payloads.get_bytes(keys.doc_payload(run_id, uri, "bytes"))
            facts_json = fleet.payloads.get_json(keys.doc_payload(run_id, uri, "facts"))
            if data is None or facts_json is None:
                raise PermanentDocumentError("its in-flight copy was lost (Redis emptied or the run outlived "
                                             "HEADWATER_PAYLOAD_TTL_SECONDS); the next sync reads it again")
        # Planning needs the chunks' metadata; the fetch read only the document's manifest entry. A
        # document the fetch found absent has none: this run's claim keeps other runs from writing it.
        stored = None if fetched is not None and not fetched.stored else \
            store.document_chunks(run.source_id, [uri]).get(uri)
        s = fleet.settings
        try:
            parsed = parse_document(uri, data, facts_json.get("mime_type") or None)
            chunks = chunk_document(parsed, uri, s)
        except Exception as exc:  # noqa: BLE001  (decided as in embedded mode: never retried, this document only)
            state, reason = decisions.parse_failure(exc)
            if state == outcomes.FAILED:
                metrics.FAILURES.labels(PARSE, type(exc).__name__).inc()
                if not decisions.expected_parse_error(exc):
                    log.exception("unexpected error parsing %s in run %s", uri, run_id)
                follow(fleet, run_id, held.commit(outcomes.FAILED, reason=reason))
                _drop_payload(fleet, run_id, uri, "bytes")
                return
            fleet.redis.hset(keys.source(run.source_id, "skipped"), uri, facts_json["doc_version"])
            if stored is None:  # an entry a cut-short write left still has to go
                stored = store.documents(run.source_id, [uri]).get(uri)
            _to_write_or_end(held, outcomes.removed(run.source_id, uri, stored, outcomes.SKIPPED, reason),
                             run.target.collection)
            _drop_payload(fleet, run_id, uri, "bytes")
            return
        fleet.runs.warn(run_id, uri, parsed.warnings)
        facts = DocumentFacts(**{**facts_json, "mime_type": parsed.mime_type, "parser": parsed.parser})
        plan = plan_document(facts, chunks, stored)
        known = store.vectors_by_content_hash([r.metadata[ckeys.CONTENT_HASH] for r in plan.records])
        for record in plan.records:
            if record.metadata[ckeys.CONTENT_HASH] in known:
                record.embedding, record.metadata[ckeys.SPARSE] = known[record.metadata[ckeys.CONTENT_HASH]]
        outcome = outcomes.indexed(plan)
        # Renames are paired when the run finishes (see _pair_renames), when every removal is known.
        outcome.reason = decisions.indexed_as(stored is not None)
        new_texts = {r.metadata[ckeys.CONTENT_HASH] for r in plan.records if r.embedding is None}
        if not new_texts:
            _to_write_or_end(held, outcome, run.target.collection)
            _drop_payload(fleet, run_id, uri, "bytes")
            return
        fleet.payloads.put_json(keys.doc_payload(run_id, uri, "plan"), outcome.to_json())
        fleet.crash.reached("parse.after_plan", uri)
        # Both sides join their embedding queues in the commit, weighted by the texts they add to a batch.
        moved = held.commit("embed", (DENSE, SPARSE), weight=len(new_texts))
        fleet.crash.reached("parse.after_commit", uri)
        if moved.status == "next":
            batches.schedule(fleet, run.target.collection, SPARSE, [run_id])
            batches.schedule(fleet, run.target.collection, DENSE, [run_id])
        fleet.crash.reached("parse.after_send", uri)
        _drop_payload(fleet, run_id, uri, "bytes")
        fleet.crash.reached("parse.after_payload_delete", uri)

    run_step(fleet, run_id, PARSE, uri, body)


def _drop_payload(fleet: Fleet, run_id: str, uri: str, *parts: str) -> None:
    fleet.payloads.delete(*(keys.doc_payload(run_id, uri, part) for part in parts))


# embed --------------------------------------------------------------------------------------

_PLAN_LOST = ("its in-flight plan was lost (Redis emptied or the run outlived HEADWATER_PAYLOAD_TTL_SECONDS); "
              "the next sync reads it again")


def embed(fleet: Fleet, collection: str, side: str) -> None:
    """One side's vectors (dense or sparse) for a batch of planned documents' new chunks, then each one's join.

    The texts of every document in the batch go through the model together (each distinct text
    once; texts whose vectors are cached by content hash not at all).
    """
    def work(batch: Batch) -> list[Commit]:
        try:
            return _embed_batch(fleet, batch)
        except ConfigurationError as exc:  # this worker cannot embed at all (its model is missing)
            return [Commit(run_id, side, uri, batch.token, outcomes.FAILED, reason=str(exc))
                    for run_id, uri in batch.taken]

    def then(batch: Batch, moves: list[Moved]) -> None:
        written = {run_id for (run_id, _), moved in zip(batch.taken, moves) if moved.status == "next"}
        if written:  # both sides done: on to the write
            live = any(_is_live(fleet, run_id) for run_id in written)
            batches.schedule(fleet, collection, WRITE, written, urgent=live)

    run_batch(fleet, collection, side, work, then, (f"{side}.after_take", f"{side}.after_vectors", f"{side}.after_commit"),
              f"embedding ({side})", "check the worker's log")


def run_batch(fleet: Fleet, collection: str, step: str, work: Callable[[Batch], list[Commit]],
              then: Callable[[Batch, list[Moved]], None], points: tuple[str, str, str], doing: str, check: str) -> None:
    """Take a batch of a batched step, `work` on it while renewing its leases, commit each document, `then` go on.

    Any error from `work` puts the whole batch back for a retry after a backoff (then its
    documents fail, with `doing` and `check` in their reason); a document-specific problem is
    `work`'s to end as that document's commit.
    """
    taken_point, worked_point, committed_point = points
    batch = batches.take(fleet, collection, step)
    _follow_all(fleet, [(moved.detail, moved) for moved in batch.poisoned])
    if not batch.taken:
        return
    started, cpu_started = perf_counter(), thread_time()
    runs = {run_id for run_id, _ in batch.taken}
    batches.schedule(fleet, collection, step, runs)  # another full batch waits: another worker can start on it
    try:
        with fleet.renewing(batch.members, batch.token):
            fleet.crash.reached(taken_point)
            commits = work(batch)
            fleet.crash.reached(worked_point)
    except Exception as exc:  # noqa: BLE001  (Redis, the model or Chroma failed: retried, then its documents fail)
        metrics.RETRIES.labels(step, type(exc).__name__).inc()
        _follow_all(fleet, batches.retry(fleet, batch, exc, doing, check))
        return
    for commit in commits:
        metrics.document_moved(commit.step, commit.next_state)
    moves = fleet.state.commit_many(commits)
    fleet.crash.reached(committed_point)
    _follow_all(fleet, [(c.run_id, moved) for c, moved in zip(commits, moves)])
    then(batch, moves)
    batches.schedule(fleet, collection, step, runs)  # what gathered meanwhile
    fleet.costs.add(step, perf_counter() - started, len(batch.taken), thread_time() - cpu_started)


def _embed_batch(fleet: Fleet, batch: Batch) -> list[Commit]:
    """Compute and store the batch's vectors; returns each document's commit (on to its write, or failed)."""
    side = batch.step
    other = SPARSE if side == DENSE else DENSE
    plans = fleet.payloads.get_json_many([keys.doc_payload(run_id, uri, "plan") for run_id, uri in batch.taken])
    commits: list[Commit] = []
    wanted: dict[tuple[str, str], list[str]] = {}  # document -> content hashes it needs
    texts: dict[str, str] = {}  # content hash -> text
    # An embedding service refuses some texts before they are sent (too long for it): only their documents fail.
    too_long = fleet.dense.too_long if side == DENSE and fleet.settings.dense_from_endpoint else None
    for (run_id, uri), plan in zip(batch.taken, plans):
        try:
            fleet.check_models(fleet.run(run_id), side)
            if plan is None:
                raise PermanentDocumentError(_PLAN_LOST)
            new = {r["metadata"][ckeys.CONTENT_HASH]: r["text"] for r in plan["upserts"] if r["embedding"] is None}
            refused = next(filter(None, map(too_long, new.values())), None) if too_long else None
            if refused:
                raise PermanentDocumentError(refused)
        except (ConfigurationError, PermanentDocumentError, RunDataMissing) as exc:
            commits.append(Commit(run_id, side, uri, batch.token, outcomes.FAILED, reason=str(exc)))
            continue
        texts.update(new)
        wanted[(run_id, uri)] = list(new)
        commits.append(Commit(run_id, side, uri, batch.token, "write", (WRITE,), (other,)))
    # Every document left checked its run's model against this worker's: the cache key is this model's.
    model = fleet.dense_model if side == DENSE else fleet.sparse_model
    hashes = list(texts)
    values = dict(zip(hashes, fleet.redis.mget([keys.vector_cache(model, h) for h in hashes]))) if hashes else {}
    missing = [h for h in hashes if values[h] is None]
    if missing:
        try:
            values.update(zip(missing, _vectors(fleet, side, [texts[h] for h in missing])))
        except EndpointRejected as exc:  # a wrong model name or key: retrying will not help
            return [Commit(c.run_id, side, c.uri, batch.token, outcomes.FAILED, reason=str(exc)) if c.next_state != outcomes.FAILED
                    else c for c in commits]
        pipe = fleet.redis.pipeline(transaction=False)
        for h in missing:
            pipe.set(keys.vector_cache(model, h), values[h], ex=fleet.settings.payload_ttl_seconds)
        pipe.incrby(f"{keys.EMBEDDED_TEXTS}:{side}", len(missing))
        pipe.execute()
    fleet.payloads.put_hashes({keys.doc_payload(run_id, uri, side): {h: values[h] for h in needed}
                               for (run_id, uri), needed in wanted.items()})
    return commits


def _vectors(fleet: Fleet, side: str, texts: list[str]) -> list[bytes]:
    """Each text's vector as stored in the payloads: float32 bytes (dense) or the encoded sparse vector."""
    metrics.embedded(side, len(texts))
    if side == DENSE:
        return [pack_dense(v) for v in fleet.dense.embed(texts)]
    return [encode_sparse(i, v).encode() for i, v in fleet.sparse.encode(texts)]


def embed_dense(fleet: Fleet, collection: str) -> None:
    embed(fleet, collection, DENSE)


def embed_sparse(fleet: Fleet, collection: str) -> None:
    embed(fleet, collection, SPARSE)


def _follow_all(fleet: Fleet, moves: list[tuple[str, Moved]]) -> None:
    for run_id, moved in moves:
        follow(fleet, run_id, moved)


# write --------------------------------------------------------------------------------------

def flush(fleet: Fleet, collection: str) -> None:
    """Write a batch of ready documents of one collection to Chroma, then end them."""
    def work(batch: Batch) -> list[Commit]:
        ends = _write_batch(fleet, batch.taken)
        return [Commit(run_id, WRITE, uri, batch.token, state, reason=reason)
                for (run_id, uri), (state, reason) in zip(batch.taken, ends)]

    def then(batch: Batch, moves: list[Moved]) -> None:
        fleet.payloads.delete(*(keys.doc_payload(run_id, uri, part) for run_id, uri in batch.taken
                                for part in _PAYLOAD_PARTS))

    run_batch(fleet, collection, WRITE, work, then, ("flush.after_take", "flush.after_write", "flush.after_commit"),
              "writing to Chroma", "check the Chroma server")


def _write_batch(fleet: Fleet, taken: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Write the batch's documents in store-sized batches; returns the state each ends in and why."""
    plans = fleet.payloads.get_json_many([keys.doc_payload(run_id, uri, "plan") for run_id, uri in taken])
    vectors = fleet.payloads.get_hashes([keys.doc_payload(run_id, uri, side) for run_id, uri in taken
                                         for side in (DENSE, SPARSE)])
    writer: BatchWriter | None = None
    ends = []
    for n, ((run_id, uri), plan) in enumerate(zip(taken, plans)):
        run = fleet.run(run_id)
        writer = writer or BatchWriter(fleet.store(run.target),
                                       after_chunks=lambda: fleet.crash.reached("flush.after_chunks"))
        ends.append(_queue_writes(fleet, writer, run, uri, plan, vectors[2 * n], vectors[2 * n + 1]))
    writer.flush()
    for (run_id, uri), (state, _) in zip(taken, ends):
        if state == outcomes.INDEXED:
            metrics.searchable(fleet, fleet.run(run_id), uri)
    return ends


def _queue_writes(fleet: Fleet, writer: BatchWriter, run, uri: str, plan: dict | None,  # noqa: ANN001
                  dense: dict[str, bytes], sparse: dict[str, bytes]) -> tuple[str, str]:
    """Put one document's writes on the batch; returns the state it ends in and why."""
    if plan is None:
        return outcomes.FAILED, "its in-flight plan was lost before it was written; the next sync reads it again"
    outcome = outcomes.Outcome.from_json(plan)
    for record in outcome.upserts:
        if record.embedding is None:
            h = record.metadata[ckeys.CONTENT_HASH]
            if h not in dense or h not in sparse:
                return outcomes.FAILED, "its vectors were lost before it was written; the next sync reads it again"
            record.embedding = unpack_dense(dense[h])
            record.metadata[ckeys.SPARSE] = sparse[h].decode()
    newer = not fleet.runs.claim_document(run.source_id, uri, run.seq)
    if not newer and run.kind == "live":
        newer = not fleet.runs.claim_order(run.source_id, fleet.runs.change(run.id, uri))
    if newer:  # a newer run or a newer live change already owns this document
        return outcomes.UNCHANGED, ""
    outcomes.write_outcome(writer, outcome)
    return outcome.state, outcome.reason


def _discover(fleet: Fleet, run: Any, held: Held, connector: Discoverer, uri: str) -> None:
    """Admit where a fetched page leads (headwater.pipeline.discovery); the run takes each uri once, up to max_pages."""
    visited = connector.visited(uri)
    if visited is None:
        return
    depth = fleet.runs.depth(run.id, uri)
    found = [(link, at, json.dumps(DocumentChange(run.source_id, link, Op.UPSERT).to_json()))
             for link, at in discovery.candidates(visited, depth)
             if discovery.admit(link, at, connector.max_depth, connector.refusal) is None]
    if found:
        follow(fleet, run.id, fleet.state.discover(run.id, held.token, uri, found, connector.max_pages))


# finish -------------------------------------------------------------------------------------

def finish(fleet: Fleet, run_id: str) -> None:
    """Every document is terminal: remove what the listing no longer has, close the run, drop its payloads."""
    def body(held: Held) -> None:
        run = fleet.run(run_id)
        gone = fleet.runs.gone(run_id)
        if gone:
            # A crawl's gone list holds every stored document; those it reached are not gone, and those
            # it did not are gone only as discovery.deletions says (not after a crawl max_pages cut short).
            states = fleet.runs.states(run_id)
            gone = [uri for uri in gone if states.get(uri) in (None, outcomes.DELETED)]
            if isinstance(fleet.connector(run_id), Discoverer):
                answered = [uri for uri, state in states.items() if state == outcomes.DELETED]
                gone = discovery.deletions(gone, answered, complete=not fleet.runs.truncated(run_id))
                reached = sum(1 for state in states.values() if state != outcomes.DELETED)
                check_deletions(run.source_id, len(gone) + reached, len(gone), reached, run.allow_mass_delete)
        if gone:
            store = fleet.store(run.target)
            stored = store.documents(run.source_id, gone)
            writer = BatchWriter(store)
            for uri in gone:
                _remember_removed(fleet, run_id, uri, stored.get(uri))
                if uri in stored and fleet.runs.claim_document(run.source_id, uri, run.seq):
                    outcomes.write_outcome(writer, outcomes.removed(run.source_id, uri, stored[uri], outcomes.DELETED))
            writer.flush()
            fleet.crash.reached("finish.after_delete")
            fleet.runs.mark_deleted(run_id, gone)
        _pair_renames(fleet, run)
        fleet.state.close(run_id, held.token)
        pipe = fleet.redis.pipeline()
        for uri in fleet.runs.states(run_id):
            pipe.delete(*(keys.doc_payload(run_id, uri, part) for part in _PAYLOAD_PARTS))
        pipe.execute()

    run_step(fleet, run_id, FINISH, "", body)


def _end_deleted(held: Held, run, stored: Any) -> None:  # noqa: ANN001
    """The held document is deleted: what it held is kept for the rename pairing, and its records' removal written."""
    _remember_removed(held.fleet, held.run_id, held.uri, stored)
    _to_write_or_end(held, outcomes.removed(run.source_id, held.uri, stored, outcomes.DELETED), run.target.collection)


def _remember_removed(fleet: Fleet, run_id: str, uri: str, stored: Any) -> None:
    """What a document this run removes held (its content hash), for the rename pairing when the run finishes."""
    if stored is not None and stored.complete and stored.doc_hash:
        fleet.redis.hset(keys.run(run_id, "removed"), uri, stored.doc_hash)


def _pair_renames(fleet: Fleet, run) -> None:  # noqa: ANN001
    """Documents this run added with the bytes of one it removed were renamed: note both as a move.

    The same pairing embedded mode makes while it reads (headwater.pipeline.decisions.rename_origin), made
    here once every removal of the run is known. The writes were the same either way (a renamed
    document is chunked again under its new path, and its old records are deleted); only the report differs.
    """
    removed = {k.decode(): v.decode() for k, v in fleet.redis.hgetall(keys.run(run.id, "removed")).items()}
    if not removed:
        return
    states, notes = fleet.runs.states(run.id), fleet.runs.notes(run.id)
    removed = {uri: h for uri, h in removed.items() if states.get(uri) == outcomes.DELETED}
    added = sorted(uri for uri, state in states.items() if state == outcomes.INDEXED and notes.get(uri) == decisions.ADDED)
    if not removed or not added:
        return
    vanishing = {removed[uri]: uri for uri in sorted(removed)}
    held = fleet.store(run.target).documents(run.source_id, added)
    moves = {}
    for uri in added:
        doc = held.get(uri)
        origin = decisions.rename_origin(uri, doc.doc_hash, None, vanishing) if doc and doc.doc_hash else None
        if origin:
            moves[uri] = decisions.indexed_as(False, origin)
            moves[origin] = decisions.MOVED_TO + uri
    if moves:
        fleet.redis.hset(keys.run(run.id, "notes"), mapping=moves)


# sweep --------------------------------------------------------------------------------------

def sweep(fleet: Fleet) -> int:
    """Re-drive every lease whose deadline passed (its holder is gone, or its message was lost)."""
    lock = fleet.redis.lock(keys.SWEEP_LOCK, timeout=max(fleet.settings.sweep_interval_seconds, 5), blocking=False)
    if not lock.acquire():
        return 0  # another sweep is running: sweeps never overlap
    redriven = 0
    batches_due: set[tuple[str, str]] = set()  # (step, collection): one batch task each per sweep
    try:
        lost = WorkerRegistry(fleet.redis).newly_lost()
        if lost:  # the messages they had taken but not started died with them: re-send those steps now
            hastened = fleet.state.hasten_unheld()
            log.warning("workers %s went offline; %d queued steps are sent again now", ", ".join(lost), hastened)
        for lease in fleet.state.expired():
            if fleet.state.redrive(lease, fleet.settings.redrive_after_seconds) != 1:
                continue
            run_id, step, uri = keys.split_member(lease)
            if step in BATCHED_STEPS:  # the re-drive put the document back in its batch queue
                batches_due.add((step, fleet.run(run_id).target.collection))
            else:
                fleet.send(TASK_OF_STEP[step], [run_id] + ([uri] if uri else []))
            redriven += 1
        for step, collection in sorted(batches_due):
            fleet.send(BATCH_TASK[step], [collection])
    finally:
        release_quietly(lock, "the sweep")
    if redriven:
        log.info("sweeper re-drove %d steps whose leases expired", redriven)
    return redriven


__all__ = ["list_source", "fetch", "parse", "embed_dense", "embed_sparse", "flush", "finish", "sweep", "follow",
           "TASK_OF_STEP"]

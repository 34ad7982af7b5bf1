"""Sync runs: every pass is a run with an id, a status, counters, per-document states and errors, in Redis.

Redis holds run history, not data: losing it loses the history and costs a reconciliation pass,
never an indexed document (Chroma is the record of what is indexed).

A run carries its target (collection and the identity of each model), so every worker opens the
collection the run was queued for and refuses to mix vectors of other models into it. Runs of one
source are numbered in order (`seq`); each document remembers the newest run that wrote it, and a
run may write a document only if no newer run already has. History is kept per source: the newest
`history` finished runs; an unfinished run is never trimmed.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from headwater.pipeline import decisions
from headwater.errors import RunDataMissing
from headwater.fleet import keys
from headwater.models import DocumentChange, Trigger
from headwater.pipeline.report import SyncReport

COUNTERS = ("scanned", "unchanged", "queued", "indexed", "skipped", "deleted", "failed")


class RunStatus(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETE = "complete"
    COMPLETE_WITH_ERRORS = "complete_with_errors"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self not in (RunStatus.PENDING, RunStatus.RUNNING)


@dataclass(frozen=True)
class Target:
    """Where a run writes: the collection and the models whose vectors it holds."""

    collection: str
    dense_model: str
    sparse_model: str


@dataclass
class Run:
    id: str
    source_id: str
    seq: int
    kind: str
    status: RunStatus
    created_at: float
    target: Target
    started_at: float | None = None
    finished_at: float | None = None
    counters: dict[str, int] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    allow_mass_delete: bool = False
    trigger: str = Trigger.MANUAL.value
    warnings: dict[str, str] = field(default_factory=dict)  # uri -> what went wrong without stopping it
    skipped: dict[str, str] = field(default_factory=dict)  # uri -> why it was skipped

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "source_id": self.source_id, "seq": self.seq, "kind": self.kind, "trigger": self.trigger,
                "status": self.status.value, "created_at": self.created_at, "started_at": self.started_at,
                "finished_at": self.finished_at, "collection": self.target.collection,
                "dense_model": self.target.dense_model, "sparse_model": self.target.sparse_model,
                **{c: self.counters.get(c, 0) for c in COUNTERS}, "errors": self.errors,
                "skip_reasons": self.skipped, "warnings": self.warnings}


# Claim a document for a run unless a newer run of the same source already wrote it.
_CLAIM = """
local current = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if tonumber(ARGV[2]) < current then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""

# Move to a status only from an unfinished one: a finished run's status never changes again.
_TRANSITION = """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return 0 end
if status ~= 'pending' and status ~= 'running' then return 0 end
if ARGV[1] == 'running' and status == 'running' then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[1])
if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], ARGV[3], ARGV[2]) end
return 1
"""

# Let a live change write unless a newer change of the same uri already wrote (order keys compare as strings).
_ORDER = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current and ARGV[2] < current then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""

# Accept a live change only if it is newer than every change of the same uri accepted before.
_ACCEPT = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current and ARGV[2] <= current then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""


class RunStore:
    """Run records in Redis; the client is passed in (built by headwater.redis_connection.redis_client)."""

    def __init__(self, redis: Any, history: int = 100) -> None:
        self.redis = redis
        self.history = history
        self._claim = redis.register_script(_CLAIM)
        self._transition = redis.register_script(_TRANSITION)
        self._accept = redis.register_script(_ACCEPT)
        self._order = redis.register_script(_ORDER)

    def create(self, source_id: str, spec: dict[str, Any], target: Target, *, kind: str = "full", window: int = 32,
               allow_mass_delete: bool = False, changes: list[DocumentChange] | None = None,
               list_deadline: float | None = None, trigger: Trigger = Trigger.MANUAL) -> Run:
        """A new pending run with its source spec (and, for live runs, its documents) and its first lease.

        Everything is written in one transaction, so a run either exists with a lease that the
        sweeper re-drives, or does not exist: an enqueuing process that dies halfway strands nothing.
        """
        seq = int(self.redis.incr(keys.source(source_id, "seq")))
        run = Run(id=uuid.uuid4().hex, source_id=source_id, seq=seq, kind=kind, status=RunStatus.PENDING,
                  created_at=time.time(), target=target, allow_mass_delete=allow_mass_delete, trigger=Trigger(trigger).value)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(keys.run(run.id), mapping={
            "id": run.id, "source_id": source_id, "seq": seq, "kind": kind, "trigger": run.trigger,
            "status": run.status.value,
            "created_at": run.created_at, "collection": target.collection, "dense_model": target.dense_model,
            "sparse_model": target.sparse_model, "window": window, "listed": 0,
            "allow_mass_delete": int(allow_mass_delete), **{c: 0 for c in COUNTERS}})
        pipe.set(keys.run(run.id, "source"), json.dumps(spec))
        pipe.zadd(keys.ALL_RUNS, {run.id: run.created_at})
        pipe.zadd(keys.source(source_id, "runs"), {run.id: run.created_at})
        if changes is not None:
            self._add_documents(pipe, run.id, changes)
            pipe.hset(keys.run(run.id), mapping={"scanned": len(changes), "queued": len(changes)})
        pipe.zadd(keys.LEASES, {keys.member(run.id, "list"): list_deadline or time.time() + 120})
        pipe.execute()
        self._trim(source_id)
        return run

    def _trim(self, source_id: str) -> None:
        """Keep the newest `history` finished runs of a source; unfinished runs are never trimmed."""
        ids = [_text(i) for i in self.redis.zrevrange(keys.source(source_id, "runs"), 0, -1)]
        finished = [i for i in ids if (self.status(i) or RunStatus.COMPLETE).finished]
        stale = finished[self.history:]
        if not stale:
            return
        pipe = self.redis.pipeline()
        for run_id in stale:
            pipe.delete(*(keys.run(run_id, part) for part in
                          ("", "source", "docs", "changes", "todo", "active", "gone", "errors", "notes", "warnings",
                           "removed", "claims", "depth")))
        pipe.zrem(keys.source(source_id, "runs"), *stale)
        pipe.zrem(keys.ALL_RUNS, *stale)
        pipe.execute()

    def get(self, run_id: str) -> Run | None:
        data = {_text(k): _text(v) for k, v in self.redis.hgetall(keys.run(run_id)).items()}
        if not data:
            return None
        return Run(id=data["id"], source_id=data["source_id"], seq=int(data["seq"]), kind=data["kind"],
                   status=RunStatus(data["status"]), created_at=float(data["created_at"]),
                   target=Target(data.get("collection", ""), data.get("dense_model", ""), data.get("sparse_model", "")),
                   started_at=_float(data.get("started_at")), finished_at=_float(data.get("finished_at")),
                   counters={c: int(data.get(c, 0)) for c in COUNTERS}, errors=self.errors(run_id),
                   allow_mass_delete=data.get("allow_mass_delete") == "1",
                   trigger=data.get("trigger", Trigger.MANUAL.value), warnings=self.warnings(run_id),
                   skipped=self.skipped(run_id))

    def status(self, run_id: str) -> RunStatus | None:
        raw = self.redis.hget(keys.run(run_id), "status")
        return RunStatus(_text(raw)) if raw else None

    def errors(self, run_id: str) -> dict[str, str]:
        return {_text(k): _text(v) for k, v in self.redis.hgetall(keys.run(run_id, "errors")).items()}

    def notes(self, run_id: str) -> dict[str, str]:
        """uri -> how the document ended, where that needs saying (headwater.pipeline.decisions)."""
        return self._hash(run_id, "notes")

    def skipped(self, run_id: str) -> dict[str, str]:
        """Why each skipped document was skipped."""
        notes = self.notes(run_id)
        return {uri: notes.get(uri, "") for uri, state in self.states(run_id).items() if state == "skipped"}

    def warnings(self, run_id: str) -> dict[str, str]:
        return self._hash(run_id, "warnings")

    def _hash(self, run_id: str, part: str) -> dict[str, str]:
        return {_text(k): _text(v) for k, v in self.redis.hgetall(keys.run(run_id, part)).items()}

    def warn(self, run_id: str, uri: str, warnings: tuple[str, ...]) -> None:
        """Record what went wrong with a document without stopping it (a redelivered step writes the same)."""
        if warnings:
            self.redis.hset(keys.run(run_id, "warnings"), uri, "; ".join(warnings))

    def report(self, run: Run) -> SyncReport:
        """A finished run as embedded mode reports a pass: documents added, updated, moved, ..., with reasons."""
        report = SyncReport(source_id=run.source_id, started_at=run.started_at or run.created_at,
                            finished_at=run.finished_at)
        notes = self.notes(run.id)
        for uri, state in self.states(run.id).items():
            note = notes.get(uri, "")
            if state == "indexed":
                if note.startswith(decisions.MOVED_FROM):
                    report.moved += 1
                elif note == decisions.UPDATED:
                    report.updated += 1
                else:
                    report.added += 1
            elif state == "unchanged":
                report.unchanged += 1
            elif state == "deleted" and not note.startswith(decisions.MOVED_TO):
                report.deleted += 1
            elif state == "skipped":
                report.skip(uri, note)
        report.failed.update(run.errors)
        report.warnings.update(run.warnings)
        return report

    def states(self, run_id: str) -> dict[str, str]:
        """uri -> state of every document the run knows."""
        return {_text(k): _text(v) for k, v in self.redis.hgetall(keys.run(run_id, "docs")).items()}

    def list(self, limit: int = 50, source_id: str | None = None) -> list[Run]:
        """The newest runs first (of one source, or of all)."""
        index = keys.source(source_id, "runs") if source_id else keys.ALL_RUNS
        ids = self.redis.zrevrange(index, 0, limit - 1)
        return [run for run in (self.get(_text(i)) for i in ids) if run is not None]

    def spec(self, run_id: str) -> dict[str, Any]:
        raw = self.redis.get(keys.run(run_id, "source"))
        if raw is None:
            raise RunDataMissing(f"run {run_id} has no source spec (its history was trimmed or Redis was emptied)")
        return json.loads(raw)

    def change(self, run_id: str, uri: str) -> DocumentChange:
        raw = self.redis.hget(keys.run(run_id, "changes"), uri)
        if raw is None:
            raise RunDataMissing(f"run {run_id} has no change for {uri}")
        return DocumentChange.from_json(json.loads(raw))

    def gone(self, run_id: str) -> list[str]:
        return [_text(u) for u in self.redis.lrange(keys.run(run_id, "gone"), 0, -1)]

    def start(self, run_id: str) -> bool:
        return bool(self._transition(keys=[keys.run(run_id)], args=[RunStatus.RUNNING.value, time.time(), "started_at"]))

    def store_listing(self, run_id: str, todo: list[DocumentChange], unchanged: list[str], gone: list[str],
                      scanned: int, truncated: bool = False) -> None:
        """The run's documents, written at once (a repeated listing replaces an earlier one whole)."""
        pipe = self.redis.pipeline(transaction=True)
        for part in ("docs", "changes", "todo", "gone"):
            pipe.delete(keys.run(run_id, part))
        self._add_documents(pipe, run_id, todo)
        for start in range(0, len(unchanged), 1000):
            pipe.hset(keys.run(run_id, "docs"), mapping={u: "unchanged" for u in unchanged[start:start + 1000]})
        for start in range(0, len(gone), 1000):
            pipe.rpush(keys.run(run_id, "gone"), *gone[start:start + 1000])
        pipe.hset(keys.run(run_id), mapping={"scanned": scanned, "unchanged": len(unchanged), "queued": len(todo)})
        if truncated:  # a crawl whose seeds max_pages already cut: it cannot see the whole site
            pipe.hset(keys.run(run_id), "truncated", "1")
        pipe.execute()

    def depth(self, run_id: str, uri: str) -> int:
        """How many links a crawled document is from a seed (a seed, or a document of another kind: 0)."""
        raw = self.redis.hget(keys.run(run_id, "depth"), uri)
        return int(raw) if raw is not None else 0

    def truncated(self, run_id: str) -> bool:
        """Whether max_pages left a URL out of this crawl (so what it did not reach was not looked at)."""
        return self.redis.hget(keys.run(run_id), "truncated") is not None

    @staticmethod
    def _add_documents(pipe: Any, run_id: str, changes: list[DocumentChange]) -> None:
        for start in range(0, len(changes), 1000):
            part = changes[start:start + 1000]
            pipe.hset(keys.run(run_id, "docs"), mapping={c.uri: "queued" for c in part})
            pipe.hset(keys.run(run_id, "changes"), mapping={c.uri: json.dumps(c.to_json()) for c in part})
            pipe.rpush(keys.run(run_id, "todo"), *(c.uri for c in part))

    def mark_deleted(self, run_id: str, uris: list[str]) -> None:
        """The gone documents were removed (idempotent: a repeated finish sets the same values)."""
        pipe = self.redis.pipeline(transaction=True)
        for start in range(0, len(uris), 1000):
            pipe.hset(keys.run(run_id, "docs"), mapping={u: "deleted" for u in uris[start:start + 1000]})
        pipe.hset(keys.run(run_id), "deleted", len(uris))
        pipe.execute()

    def fail_run(self, run_id: str, reason: str) -> bool:
        """The run cannot go on (its source cannot be listed, it would delete too much): failed, nothing deleted."""
        self.redis.hsetnx(keys.run(run_id, "errors"), "(source)", reason)
        return bool(self._transition(keys=[keys.run(run_id)], args=[RunStatus.FAILED.value, time.time(), "finished_at"]))

    def cancel(self, run_id: str) -> bool:
        """Cancel an unfinished run; its remaining steps find it finished and stop."""
        return bool(self._transition(keys=[keys.run(run_id)],
                                     args=[RunStatus.CANCELLED.value, time.time(), "finished_at"]))

    def claim_document(self, source_id: str, uri: str, seq: int) -> bool:
        """Whether the run numbered `seq` may write this document (no newer run of the source has)."""
        return bool(self._claim(keys=[keys.source(source_id, "written-by")], args=[uri, seq]))

    def accept_live(self, source_id: str, change: DocumentChange) -> bool:
        """Whether a live change is newer than every change of its uri accepted before (duplicates are not).

        Compared only with changes of the same order space (one hash per space): an S3 sequencer
        held against a 20-digit time would drop every later event of the key, or every later HEAD.
        """
        return bool(self._accept(keys=[_order_hash(source_id, "latest", change)], args=[change.uri, change.order_key]))

    def claim_order(self, source_id: str, change: DocumentChange) -> bool:
        """Whether a live change may write its document: no newer change of the uri has been written.

        Checked at write time, not acceptance: an older change whose run read the newer bytes may
        write them (a newer run deduplicated against it), but never after a newer change wrote.
        """
        return bool(self._order(keys=[_order_hash(source_id, "written-order", change)],
                                args=[change.uri, change.order_key]))


def _order_hash(source_id: str, part: str, change: DocumentChange) -> str:
    """The hash of order keys a change is compared in: the default space's, or its own space's."""
    return keys.source(source_id, f"{part}:{change.order_space}" if change.order_space else part)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _float(value: str | None) -> float | None:
    return float(value) if value not in (None, "") else None

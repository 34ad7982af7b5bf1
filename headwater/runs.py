"""Sync runs: every pass is a run with an id, a status, counters and per-document errors, kept in Redis.

Redis holds run history, not data: losing it loses the history and costs a reconciliation pass,
never an indexed document (Chroma is the record of what is indexed).

Runs of one source are numbered in order (`seq`). Each document remembers the newest run that
wrote it, and a run may write a document only if no newer run already has: a late task from an
older run can never overwrite what a newer run indexed.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

COUNTERS = ("scanned", "unchanged", "queued", "indexed", "deleted", "failed")
_PREFIX = "headwater"
_HISTORY = 1000  # runs kept per source


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


@dataclass
class Run:
    id: str
    source_id: str
    seq: int
    kind: str
    status: RunStatus
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    counters: dict[str, int] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "source_id": self.source_id, "seq": self.seq, "kind": self.kind,
                "status": self.status.value, "created_at": self.created_at, "started_at": self.started_at,
                "finished_at": self.finished_at, **{c: self.counters.get(c, 0) for c in COUNTERS},
                "errors": self.errors}


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
redis.call('HSET', KEYS[1], 'status', ARGV[1])
if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], ARGV[3], ARGV[2]) end
return 1
"""


class RunStore:
    """Run records in Redis; the client is passed in (built by headwater.fleet.redis_client)."""

    def __init__(self, redis: Any) -> None:
        self.redis = redis
        self._claim = redis.register_script(_CLAIM)
        self._transition = redis.register_script(_TRANSITION)

    def _key(self, run_id: str) -> str:
        return f"{_PREFIX}:run:{run_id}"

    def create(self, source_id: str, kind: str = "full") -> Run:
        """A new pending run, numbered after every earlier run of its source."""
        seq = int(self.redis.incr(f"{_PREFIX}:source:{source_id}:seq"))
        run = Run(id=uuid.uuid4().hex, source_id=source_id, seq=seq, kind=kind, status=RunStatus.PENDING,
                  created_at=time.time())
        pipe = self.redis.pipeline()
        pipe.hset(self._key(run.id), mapping={"id": run.id, "source_id": source_id, "seq": seq, "kind": kind,
                                              "status": run.status.value, "created_at": run.created_at,
                                              **{c: 0 for c in COUNTERS}})
        pipe.zadd(f"{_PREFIX}:runs", {run.id: run.created_at})
        pipe.execute()
        self._trim()
        return run

    def _trim(self) -> None:
        stale = self.redis.zrange(f"{_PREFIX}:runs", 0, -_HISTORY - 1)
        if stale:
            pipe = self.redis.pipeline()
            for run_id in stale:
                pipe.delete(self._key(_text(run_id)), self._key(_text(run_id)) + ":errors")
            pipe.zrem(f"{_PREFIX}:runs", *stale)
            pipe.execute()

    def get(self, run_id: str) -> Run | None:
        data = {_text(k): _text(v) for k, v in self.redis.hgetall(self._key(run_id)).items()}
        if not data:
            return None
        errors = {_text(k): _text(v) for k, v in self.redis.hgetall(self._key(run_id) + ":errors").items()}
        return Run(id=data["id"], source_id=data["source_id"], seq=int(data["seq"]), kind=data["kind"],
                   status=RunStatus(data["status"]), created_at=float(data["created_at"]),
                   started_at=_float(data.get("started_at")), finished_at=_float(data.get("finished_at")),
                   counters={c: int(data.get(c, 0)) for c in COUNTERS}, errors=errors)

    def list(self, limit: int = 50) -> list[Run]:
        """The newest runs first."""
        ids = self.redis.zrevrange(f"{_PREFIX}:runs", 0, limit - 1)
        return [run for run in (self.get(_text(i)) for i in ids) if run is not None]

    def start(self, run_id: str) -> bool:
        return bool(self._transition(keys=[self._key(run_id)], args=[RunStatus.RUNNING.value, time.time(), "started_at"]))

    def count(self, run_id: str, counter: str, amount: int = 1) -> None:
        if counter not in COUNTERS:
            raise ValueError(f"unknown run counter {counter!r}")
        self.redis.hincrby(self._key(run_id), counter, amount)

    def record_error(self, run_id: str, uri: str, reason: str) -> None:
        """A document failed permanently in this run (counted once per document)."""
        if self.redis.hsetnx(self._key(run_id) + ":errors", uri, reason):
            self.count(run_id, "failed")

    def finish(self, run_id: str, failed: bool = False) -> RunStatus | None:
        """Close the run: complete, complete with errors, or failed. A cancelled run stays cancelled."""
        run = self.get(run_id)
        if run is None:
            return None
        status = RunStatus.FAILED if failed else (
            RunStatus.COMPLETE_WITH_ERRORS if run.errors else RunStatus.COMPLETE)
        self._transition(keys=[self._key(run_id)], args=[status.value, time.time(), "finished_at"])
        return self.get(run_id).status  # type: ignore[union-attr]

    def cancel(self, run_id: str) -> bool:
        """Cancel an unfinished run; its remaining tasks see it and stop."""
        return bool(self._transition(keys=[self._key(run_id)],
                                     args=[RunStatus.CANCELLED.value, time.time(), "finished_at"]))

    def is_cancelled(self, run_id: str) -> bool:
        return _text(self.redis.hget(self._key(run_id), "status") or b"") == RunStatus.CANCELLED.value

    def claim_document(self, source_id: str, uri: str, seq: int) -> bool:
        """Whether the run numbered `seq` may write this document (no newer run of the source has)."""
        return bool(self._claim(keys=[f"{_PREFIX}:source:{source_id}:written-by"], args=[uri, seq]))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _float(value: str | None) -> float | None:
    return float(value) if value not in (None, "") else None

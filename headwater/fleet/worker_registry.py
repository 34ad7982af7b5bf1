"""Which workers the fleet has, what each is doing, and which went quiet: heartbeats kept in Redis.

Each worker's main process writes a heartbeat every HEARTBEAT_SECONDS (its queues, pool size, when
it started); each pool process records the step it is running while it runs it. A worker whose
heartbeat is older than OFFLINE_AFTER_SECONDS is offline (lost, or its host is): the dashboard
shows it with when it was last seen, until FORGET_AFTER_SECONDS. A worker stopped on purpose says
so before it goes. Redis traffic: one HSET per worker every 5 s, and one HSET and HDEL per step.
"""

from __future__ import annotations

import json
import time
from typing import Any

from headwater.fleet import keys

HEARTBEAT_SECONDS = 5.0
OFFLINE_AFTER_SECONDS = 3 * HEARTBEAT_SECONDS
FORGET_AFTER_SECONDS = 86400.0


class WorkerRegistry:
    def __init__(self, redis: Any) -> None:
        self.redis = redis

    def heartbeat(self, name: str, queues: list[str], concurrency: int, started_at: float) -> None:
        """This worker is alive now (called by its main process)."""
        self.redis.hset(keys.WORKERS, name, json.dumps({"queues": queues, "concurrency": concurrency,
                                                        "started_at": started_at, "last_seen": time.time()}))

    def started(self, name: str) -> None:
        """A worker of this name is starting: steps recorded under the name are a predecessor's, one that was
        killed before it could clear them (a restarted pod keeps its name), and no pool process runs them."""
        self.redis.delete(keys.worker_steps(name))

    def stopped(self, name: str) -> None:
        """This worker is shutting down on purpose (not lost)."""
        raw = self.redis.hget(keys.WORKERS, name)
        if raw is not None:
            self.redis.hset(keys.WORKERS, name, json.dumps({**json.loads(raw), "stopped_at": time.time()}))
        self.redis.delete(keys.worker_steps(name))

    def step_started(self, name: str, process: str, task: str, ids: dict[str, Any]) -> None:
        """A pool process of this worker began a step."""
        self.redis.hset(keys.worker_steps(name), str(process), json.dumps({"task": task, **ids, "since": time.time()}))

    def step_ended(self, name: str, process: str) -> None:
        self.redis.hdel(keys.worker_steps(name), str(process))

    def newly_lost(self) -> list[str]:
        """Workers that went offline since the last call: each loss is answered once (by the sweeper).

        A loss is known by the worker's last heartbeat, so a worker that comes back under its name and
        is lost again is a new loss. Only the sweeper calls this, and sweeps never overlap.
        """
        seen = {_text(name): _text(value) for name, value in self.redis.hgetall(keys.LOSSES_SEEN).items()}
        lost = {name: repr(record["last_seen"]) for name, record, state in self._records() if state == "offline"}
        new = {name: last_seen for name, last_seen in lost.items() if seen.get(name) != last_seen}
        if new:
            self.redis.hset(keys.LOSSES_SEEN, mapping=new)
        forgotten = set(seen) - set(lost)
        if forgotten:
            self.redis.hdel(keys.LOSSES_SEEN, *forgotten)
        return sorted(new)

    def workers(self) -> list[dict[str, Any]]:
        """Every worker seen lately: online, offline (heartbeat too old) or stopped, with its current steps."""
        found = []
        for name, record, state in self._records():
            steps = [json.loads(v) for v in self.redis.hvals(keys.worker_steps(name))] if state == "online" else []
            found.append({"name": name, "state": state, **record, "current_steps": steps})
        return sorted(found, key=lambda w: (w["state"] != "online", w["name"]))

    def _records(self) -> list[tuple[str, dict[str, Any], str]]:
        """(name, heartbeat record, state) of every worker seen lately; those older than a day are forgotten."""
        now = time.time()
        found, forgotten = [], []
        for raw_name, raw in self.redis.hgetall(keys.WORKERS).items():
            name, record = _text(raw_name), json.loads(raw)
            if now - record["last_seen"] > FORGET_AFTER_SECONDS:
                forgotten.append(name)
                continue
            state = ("stopped" if record.get("stopped_at") else
                     "offline" if now - record["last_seen"] > OFFLINE_AFTER_SECONDS else "online")
            found.append((name, record, state))
        if forgotten:
            self.redis.hdel(keys.WORKERS, *forgotten)
        return found


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

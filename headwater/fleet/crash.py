"""Named crash points between the fleet's state changes, for tests that kill a worker exactly there.

With HEADWATER_TEST_CRASH_POINTS=1 a worker checks, at each named point, whether a test armed it
(headwater:test:crash:<point> holds how many more times to act; <point>:uri optionally limits it
to one document), and does what the point was armed for (<point>:action):

  kill  SIGKILL its own process: no cleanup, no acknowledgement, exactly what a node preemption
        or an OOM kill does (the default);
  fail  raise InjectedFault, a transient error, as if Chroma, Redis or the source blinked: the
        step is retried like any other;
  bug   raise InjectedBug, a TypeError, as a mistake in Headwater or a library would: retrying
        cannot help, so a step of one document fails it at once (list and finish: their run);
        a batched step (dense, sparse, write) cannot tell whose document caused it and retries;
  hold  count the arrival in <point>:held and block (renewing its leases, as a slow step does)
        until a test sets <point>:release: a test then knows a step is in hand, not just queued.

Off (the default), a point costs one attribute check.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from headwater.errors import RetryableError
from headwater.fleet import keys

KILL, FAIL, BUG, HOLD = "kill", "fail", "bug", "hold"
ACTIONS = (KILL, FAIL, BUG, HOLD)
# A hold nobody releases ends by itself, so a test that failed before releasing cannot wedge a worker.
HOLD_LIMIT_SECONDS = 600.0
_HOLD_POLL_SECONDS = 0.05


class InjectedFault(RetryableError):
    """What a point armed to `fail` raises: a transient error, retried like a real one."""


class InjectedBug(TypeError):
    """What a point armed to `bug` raises: a programming error (headwater.errors.PROGRAMMING_ERRORS)."""


# Every point, in pipeline order; the crash-point test matrix runs once per name.
POINTS = (
    "list.after_store", "list.after_commit",
    "admit.after_pop",
    "fetch.after_payload", "fetch.after_commit",
    "parse.after_plan", "parse.after_commit", "parse.after_send", "parse.after_payload_delete",
    "dense.after_take", "dense.after_vectors", "dense.after_commit",
    "sparse.after_take", "sparse.after_vectors", "sparse.after_commit",
    "flush.after_take", "flush.after_chunks", "flush.after_write", "flush.after_commit",
    "finish.after_delete",
)


class CrashPoints:
    def __init__(self, redis: Any, enabled: bool) -> None:
        self.redis = redis
        self.enabled = enabled

    def reached(self, point: str, uri: str | None = None) -> None:
        """Kill this process, raise or block, if a test armed `point` (for this uri, when it names one)."""
        if not self.enabled:
            return
        assert point in POINTS, f"unknown crash point {point}"
        key = keys.crash_point(point)
        only = self.redis.get(key + ":uri")
        if only is not None and (uri is None or only.decode() != uri):
            return
        if self.redis.decr(key) < 0:
            return
        action = (self.redis.get(key + ":action") or KILL.encode()).decode()
        if action == FAIL:
            raise InjectedFault(f"a test armed {point} to fail")
        if action == BUG:
            raise InjectedBug(f"a test armed {point} to raise a programming error")
        if action == HOLD:
            self._hold(key)
            return
        os.kill(os.getpid(), signal.SIGKILL)

    def _hold(self, key: str) -> None:
        self.redis.incr(key + ":held")
        deadline = time.monotonic() + HOLD_LIMIT_SECONDS
        while not self.redis.exists(key + ":release") and time.monotonic() < deadline:
            time.sleep(_HOLD_POLL_SECONDS)

    def arm(self, point: str, times: int = 1, uri: str | None = None, action: str = KILL) -> None:
        """Make the next `times` arrivals at `point` (of `uri`, when given) kill their worker, fail or hold."""
        assert point in POINTS, f"unknown crash point {point}"
        assert action in ACTIONS, f"unknown crash point action {action}"
        key = keys.crash_point(point)
        # The old arming's release and count go first: a worker must not see a new hold already released.
        self.redis.delete(key + ":release", key + ":held")
        self.redis.set(key + ":action", action)
        if uri is not None:
            self.redis.set(key + ":uri", uri)
        else:
            self.redis.delete(key + ":uri")
        self.redis.set(key, times)

    def remaining(self, point: str) -> int:
        return int(self.redis.get(keys.crash_point(point)) or 0)

    def held(self, point: str) -> int:
        """How many arrivals at a point armed to `hold` have blocked there (released or not)."""
        return int(self.redis.get(keys.crash_point(point) + ":held") or 0)

    def release(self, point: str) -> None:
        """Let every arrival held at `point` go on (and any later one pass straight through)."""
        self.redis.set(keys.crash_point(point) + ":release", 1)

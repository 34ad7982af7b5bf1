"""Named crash points between the fleet's state changes, for tests that kill a worker exactly there.

With HEADWATER_TEST_CRASH_POINTS=1 a worker checks, at each named point, whether a test armed it
(headwater:test:crash:<point> holds how many more times to crash; <point>:uri optionally limits it
to one document), and SIGKILLs its own process: no cleanup, no acknowledgement, exactly what a
node preemption or an OOM kill does. Off (the default), a point costs one attribute check.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from headwater.fleet import keys

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
        """SIGKILL this process if a test armed `point` (for this uri, when it names one)."""
        if not self.enabled:
            return
        assert point in POINTS, f"unknown crash point {point}"
        only = self.redis.get(keys.crash_point(point) + ":uri")
        if only is not None and (uri is None or only.decode() != uri):
            return
        if self.redis.decr(keys.crash_point(point)) >= 0:
            os.kill(os.getpid(), signal.SIGKILL)

    def arm(self, point: str, times: int = 1, uri: str | None = None) -> None:
        """Make the next `times` arrivals at `point` (of `uri`, when given) kill their worker."""
        assert point in POINTS, f"unknown crash point {point}"
        self.redis.set(keys.crash_point(point), times)
        if uri is not None:
            self.redis.set(keys.crash_point(point) + ":uri", uri)
        else:
            self.redis.delete(keys.crash_point(point) + ":uri")

    def remaining(self, point: str) -> int:
        return int(self.redis.get(keys.crash_point(point)) or 0)

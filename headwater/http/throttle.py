"""Wrong tokens, counted per client address: past a limit they are answered 429, a right token never is.

A guesser from one address (or, behind a proxy, from everyone) is answered "too many wrong tokens,
wait N seconds" once it has failed `limit` times in a window; the right token is checked first and
always gets in, so an attacker's failures cannot lock the operator out. In a fleet the counts live
in Redis, so every serve replica sees the same ones; a single process keeps them in memory.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

# Wrong tokens allowed per client address and kind (login, bearer) in a window before they get 429.
FAILURES = 5
WINDOW_SECONDS = 60.0


class FailureThrottle:
    """Counts failures per (kind, client); `retry_after` says how long a throttled client must wait."""

    def __init__(self, redis: Any | None = None, limit: int = FAILURES, window: float = WINDOW_SECONDS) -> None:
        self.redis, self.limit, self.window = redis, limit, window
        self._local: dict[str, collections.deque[float]] = {}
        self._lock = threading.Lock()

    def failed(self, kind: str, client: str) -> float | None:
        """Record a failure; returns the seconds to wait when this client is now over the limit, else None."""
        key = f"headwater:auth-failures:{kind}:{client}"
        if self.redis is not None:
            pipe = self.redis.pipeline()
            pipe.incr(key)
            pipe.expire(key, int(self.window), nx=True)  # a fixed window from the first failure
            pipe.ttl(key)
            count, _, ttl = pipe.execute()
            return float(max(ttl, 1)) if int(count) > self.limit else None
        now = time.monotonic()
        with self._lock:
            if len(self._local) > 10_000:  # bounded memory under a spray of addresses
                self._local.clear()
            recent = self._local.setdefault(key, collections.deque())
            while recent and recent[0] < now - self.window:
                recent.popleft()
            recent.append(now)
            return max(1.0, recent[0] + self.window - now) if len(recent) > self.limit else None

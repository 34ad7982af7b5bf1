"""Where the dashboard's chart samples are kept, so a restarted (or another) serve shows the last hour too.

A fleet keeps them in Redis, shared by every serve replica: one replica takes each tick (a short
lock) so the charts get one sample per interval, not one per replica. One process keeps them in
its source database.
"""

from __future__ import annotations

import json
from typing import Any

_KEY = "headwater:stats:samples"
_TICK = "headwater:stats:tick"


class RedisSampleHistory:
    def __init__(self, redis: Any, interval: float, keep: int) -> None:
        self.redis, self.interval, self.keep = redis, interval, keep

    def append(self, sample: dict[str, Any]) -> None:
        if not self.redis.set(_TICK, "1", nx=True, px=max(1, int(self.interval * 900))):
            return  # another replica sampled this tick
        pipe = self.redis.pipeline()
        pipe.zadd(_KEY, {json.dumps(sample, sort_keys=True): sample["t"]})
        pipe.zremrangebyrank(_KEY, 0, -(self.keep + 1))
        pipe.execute()

    def load(self) -> list[dict[str, Any]]:
        return [json.loads(raw) for raw in self.redis.zrange(_KEY, -self.keep, -1)]


class DatabaseSampleHistory:
    def __init__(self, store: Any, keep: int) -> None:
        self.store, self.keep = store, keep

    def append(self, sample: dict[str, Any]) -> None:
        self.store.save_sample(sample, self.keep)

    def load(self) -> list[dict[str, Any]]:
        return self.store.samples(self.keep)

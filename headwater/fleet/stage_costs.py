"""Seconds each stage of the fleet spends per document, summed by the workers in Redis.

Every step adds its wall time (one pipelined call per step or batch), so a fleet's own costs can
be read at any time: they are what the capacity model (bench/capacity_model.py) turns into
documents per second for a pool layout. Wall time, not CPU time: it is how long a worker process
is taken by the stage, waits on Redis or Chroma included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from headwater.fleet import keys


@dataclass(frozen=True)
class StageCost:
    seconds: float
    documents: int

    @property
    def per_document(self) -> float:
        return self.seconds / self.documents if self.documents else 0.0


class StageCosts:
    def __init__(self, redis: Any) -> None:
        self.redis = redis

    def add(self, stage: str, seconds: float, documents: int) -> None:
        pipe = self.redis.pipeline(transaction=False)
        pipe.hincrbyfloat(keys.STAGE_SECONDS, stage, seconds)
        pipe.hincrby(keys.STAGE_DOCUMENTS, stage, documents)
        pipe.execute()

    def read(self) -> dict[str, StageCost]:
        seconds = self.redis.hgetall(keys.STAGE_SECONDS)
        documents = self.redis.hgetall(keys.STAGE_DOCUMENTS)
        return {k.decode(): StageCost(float(v), int(documents.get(k, 0))) for k, v in seconds.items()}

    def reset(self) -> None:
        self.redis.delete(keys.STAGE_SECONDS, keys.STAGE_DOCUMENTS)

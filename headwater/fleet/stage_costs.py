"""Seconds each stage of the fleet spends per document, summed by the workers in Redis.

Every step adds its wall time (one pipelined call per step or batch), so a fleet's own costs can
be read at any time: they are what the capacity model (bench/capacity_model.py) turns into
documents per second for a pool layout. Wall time, not CPU time: it is how long a worker process
is taken by the stage, waits on Redis or Chroma included. The CPU time of the step's thread is
kept next to it: wall time well above it is waiting (on Redis, on Chroma, or for a core another
process holds), which more processes on the same cores would not buy back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from headwater.fleet import keys


@dataclass(frozen=True)
class StageCost:
    seconds: float
    documents: int
    cpu_seconds: float = 0.0

    @property
    def per_document(self) -> float:
        return self.seconds / self.documents if self.documents else 0.0


class StageCosts:
    def __init__(self, redis: Any) -> None:
        self.redis = redis

    def add(self, stage: str, seconds: float, documents: int, cpu_seconds: float = 0.0) -> None:
        pipe = self.redis.pipeline(transaction=False)
        pipe.hincrbyfloat(keys.STAGE_SECONDS, stage, seconds)
        pipe.hincrby(keys.STAGE_DOCUMENTS, stage, documents)
        pipe.hincrbyfloat(keys.STAGE_CPU_SECONDS, stage, cpu_seconds)
        pipe.execute()

    def read(self) -> dict[str, StageCost]:
        seconds = self.redis.hgetall(keys.STAGE_SECONDS)
        documents = self.redis.hgetall(keys.STAGE_DOCUMENTS)
        cpu = self.redis.hgetall(keys.STAGE_CPU_SECONDS)
        return {k.decode(): StageCost(float(v), int(documents.get(k, 0)), float(cpu.get(k, 0.0)))
                for k, v in seconds.items()}

    def reset(self) -> None:
        self.redis.delete(keys.STAGE_SECONDS, keys.STAGE_DOCUMENTS, keys.STAGE_CPU_SECONDS)

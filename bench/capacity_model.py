"""A capacity model for a fleet: documents per second for a pool layout, from per-stage costs.

A stage's cost is the seconds one worker process (one model thread) spends on it per document,
as the workers record them (headwater.fleet.stage_costs; bench/fleet_throughput.py measures them).
A pool of n processes serving a set of stages finishes n / (sum of its stages' costs) documents a
second when it never waits; the fleet goes as fast as its slowest pool, which is the stage (or
stages) that bounds it. A stage that runs faster on other hardware (the dense model on a GPU) is
given a speed-up for the pool that runs it. Processes are assumed to have a core each.

    python -m bench.capacity_model --costs fetch=0.004,parse=0.09,dense=0.5,sparse=0.6,write=0.05 \\
        --pool 4:fetch,parse --pool 2:dense@20 --pool 2:sparse --pool 1:write
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

STAGES = ("fetch", "parse", "dense", "sparse", "write")


@dataclass(frozen=True)
class Pool:
    """`processes` worker processes serving `stages` (a stage -> speed-up on this pool's hardware)."""

    processes: int
    stages: dict[str, float] = field(default_factory=dict)

    @classmethod
    def all_queues(cls, processes: int) -> Pool:
        return cls(processes, {stage: 1.0 for stage in STAGES})

    @classmethod
    def parse(cls, text: str) -> Pool:
        """'4:fetch,parse' or '2:dense@20' (20x faster there)."""
        count, stages = text.split(":", 1)
        served = {}
        for item in stages.split(","):
            name, _, speedup = item.partition("@")
            served[name.strip()] = float(speedup or 1)
        return cls(int(count), served)

    def label(self) -> str:
        names = ", ".join(f"{s}@{x:g}x" if x != 1 else s for s, x in self.stages.items())
        return f"{self.processes} × ({names})"


@dataclass(frozen=True)
class Prediction:
    documents_per_second: float
    bound: Pool  # the pool that limits the fleet
    bounding_stage: str  # its costliest stage: where more processes or faster hardware pay off
    pools: list[tuple[Pool, float]]  # each pool's own documents per second


def predict(costs: dict[str, float], pools: list[Pool]) -> Prediction:
    """Documents per second of a fleet whose pools serve every stage once."""
    served = [s for pool in pools for s in pool.stages]
    missing = [s for s in STAGES if s in costs and s not in served]
    if missing or len(served) != len(set(served)):
        raise ValueError(f"every stage must be served by exactly one pool (missing {missing}, served {served})")
    rates = []
    for pool in pools:
        work = sum(costs.get(stage, 0.0) / speedup for stage, speedup in pool.stages.items())
        rates.append((pool, pool.processes / work if work else float("inf")))
    bound, rate = min(rates, key=lambda pair: pair[1])
    heaviest = max(bound.stages, key=lambda s: costs.get(s, 0.0) / bound.stages[s])
    return Prediction(rate, bound, heaviest, rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--costs", required=True, help="stage=seconds per document, comma-separated")
    parser.add_argument("--pool", action="append", required=True, help="PROCESSES:stage[@speedup],...")
    args = parser.parse_args()
    costs = {k: float(v) for k, v in (item.split("=") for item in args.costs.split(","))}
    prediction = predict(costs, [Pool.parse(p) for p in args.pool])
    for pool, rate in prediction.pools:
        print(f"{pool.label():50s} {rate:8.2f} documents/s")
    print(f"fleet: {prediction.documents_per_second:.2f} documents/s, bounded by {prediction.bound.label()} "
          f"(its costliest stage: {prediction.bounding_stage})")


if __name__ == "__main__":
    main()

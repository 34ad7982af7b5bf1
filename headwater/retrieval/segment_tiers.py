"""Which segments of the sparse index to merge next: size tiers, merged at the newest end.

A segment's tier is its live row count on a log scale (below TIER_BASE rows: tier 0; then one
tier per factor of FANOUT). Segments are kept oldest first with tiers that never increase
towards the newest, and merges only take segments at the newest end:

- a new segment of a higher tier than the ones before it absorbs those smaller ones;
- FANOUT segments of one tier at the newest end become one segment of the next tier;
- a segment whose rows are mostly dead (deleted or overwritten) is rewritten alone.

So a pass that changed a few chunks rewrites a few small segments rather than the whole index,
each row is rewritten about once per tier over its life, and there are at most FANOUT - 1
segments per tier (about 20 at a million rows), which bounds the per-segment cost of a query.
"""

from __future__ import annotations

TIER_BASE = 256
FANOUT = 4
MAX_DEAD_SHARE = 0.3


def tier(rows: int) -> int:
    """0 below TIER_BASE rows, then one more for each factor of FANOUT."""
    level, bound = 0, TIER_BASE
    while rows >= bound:
        level, bound = level + 1, bound * FANOUT
    return level


def merges_due(segments: list[tuple[int, int]]) -> tuple[int, int] | None:
    """The next run [start, end) of segments to merge, given (rows, live rows) oldest first; None if none."""
    for number, (rows, live) in enumerate(segments):
        if rows and rows - live > MAX_DEAD_SHARE * rows:
            return number, number + 1
    tiers = [tier(live) for _, live in segments]
    if len(tiers) >= 2 and tiers[-1] > tiers[-2]:
        start = len(tiers) - 1
        while start > 0 and tiers[start - 1] < tiers[-1]:
            start -= 1
        return start, len(tiers)
    if len(tiers) >= FANOUT and len(set(tiers[-FANOUT:])) == 1:
        return len(tiers) - FANOUT, len(tiers)
    return None

"""Size-tiered compaction of the sparse index: which segments merge, and what that costs over time."""

from __future__ import annotations

from headwater.retrieval.segment_tiers import FANOUT, TIER_BASE, merges_due, tier


def _settle(segments: list[tuple[int, int]], rewritten: list[int]) -> list[tuple[int, int]]:
    """Apply merges_due until it has nothing to do (as SparseIndex does), counting rows rewritten."""
    while (run := merges_due(segments)) is not None:
        start, end = run
        live = sum(alive for _, alive in segments[start:end])
        rewritten.append(live)
        segments = segments[:start] + ([(live, live)] if live else []) + segments[end:]
    return segments


def test_tiers_grow_by_fanout():
    assert tier(0) == tier(TIER_BASE - 1) == 0
    assert tier(TIER_BASE) == 1
    assert tier(TIER_BASE * FANOUT - 1) == 1 and tier(TIER_BASE * FANOUT) == 2


def test_fanout_segments_of_one_tier_merge_and_a_big_newcomer_absorbs_smaller_ones():
    small = [(100, 100)] * FANOUT
    assert merges_due(small) == (0, FANOUT)
    assert merges_due(small[:-1]) is None
    big = TIER_BASE * FANOUT
    assert merges_due([(big * 4, big * 4), (100, 100), (100, 100), (big, big)]) == (1, 4)


def test_a_mostly_dead_segment_is_rewritten_alone():
    assert merges_due([(10_000, 6_000), (100, 100)]) == (0, 1)
    assert merges_due([(10_000, 8_000), (100, 100)]) is None


def test_many_small_passes_keep_few_segments_and_rewrite_each_row_a_few_times():
    segments: list[tuple[int, int]] = []
    rewritten: list[int] = []
    written = 0
    for n in range(2_000):  # 2,000 passes of 100 chunks: 200,000 rows
        segments = _settle(segments + [(100, 100)], rewritten)
        written += 100
        tiers = [tier(live) for _, live in segments]
        assert tiers == sorted(tiers, reverse=True), "tiers never increase towards the newest segment"
        assert all(tiers.count(t) < FANOUT for t in set(tiers))
    assert len(segments) <= 3 * (tier(written) + 1)
    # A full rewrite every dozen passes would rewrite ~16.7 million rows here; tiers stay near log(rows).
    assert sum(rewritten) < (tier(written) + 2) * written

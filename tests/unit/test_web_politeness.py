"""The adaptive per-host delay (AutoThrottle's rule), its back-off, its floor, and the sitemap lastmod skip."""

from __future__ import annotations

import pytest

from connectors.web_politeness import (BACKOFF_FLOOR_SECONDS, MAX_DELAY_SECONDS, LocalPacer, Throttle,
                                       next_delay, unchanged_by_lastmod)


def test_a_fast_host_brings_the_delay_down_to_its_latency():
    delay = 0.5  # the source's delay_seconds: where every host starts
    delay = next_delay(delay, 0.004, 200)
    assert delay == pytest.approx(0.252)  # halfway toward the latency
    for _ in range(12):
        delay = next_delay(delay, 0.004, 304)
    assert 0.004 <= delay < 0.005


def test_a_slow_host_gets_at_least_its_latency_at_once():
    assert next_delay(0.5, 2.0, 200) == 2.0
    assert next_delay(0.5, 500.0, 200) == MAX_DELAY_SECONDS


def test_429_and_503_back_off_and_honour_retry_after():
    assert next_delay(0.004, 0.004, 429) == BACKOFF_FLOOR_SECONDS
    assert next_delay(3.0, 0.004, 503) == 6.0
    assert next_delay(0.5, 0.004, 429, retry_after=20.0) == 20.0
    assert next_delay(40.0, 0.004, 503) == MAX_DELAY_SECONDS


def test_error_answers_never_speed_the_crawl_up():
    assert next_delay(0.5, 0.001, 500) == 0.5
    assert next_delay(0.5, 0.9, 500) == 0.9


def test_the_delay_never_goes_below_robots_crawl_delay():
    throttle = Throttle(LocalPacer(), start_delay=0.5, floor=lambda host: 2.0 if host == "slow.example" else 0.0)
    assert throttle.current("slow.example") == 2.0 and throttle.current("fast.example") == 0.5
    for host in ("slow.example", "fast.example"):
        for _ in range(20):
            throttle.observed(host, 0.001, 200)
    assert throttle.current("slow.example") == 2.0
    assert throttle.current("fast.example") < 0.01


def test_a_page_is_skipped_only_when_the_sitemap_says_it_is_no_newer():
    assert unchanged_by_lastmod(1_700_000_000.0, 1_700_000_000.0)
    assert not unchanged_by_lastmod(1_700_000_000.0, 1_700_000_001.0)
    assert not unchanged_by_lastmod(None, 1_700_000_000.0)  # fetched when the sitemap gave no date
    assert not unchanged_by_lastmod(1_700_000_000.0, None)  # the sitemap no longer dates it

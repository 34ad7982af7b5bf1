"""What serve replicas of a fleet share through its Redis: wrong-token counts and the dashboard's chart history."""

from __future__ import annotations

import pytest
import redis

from headwater.http.throttle import FAILURES, FailureThrottle
from tests.services import redis_server

pytestmark = pytest.mark.timeout(60)


def test_wrong_token_counts_are_shared_by_serve_replicas(tmp_path):
    with redis_server(tmp_path) as url:
        client = redis.Redis.from_url(url)
        one, two = FailureThrottle(client), FailureThrottle(client)
        answers = [(one if n % 2 else two).failed("bearer", "203.0.113.9") for n in range(FAILURES + 1)]
        assert answers[:FAILURES] == [None] * FAILURES and 0 < answers[-1] <= 60
        assert one.failed("login", "203.0.113.9") is None  # logins are counted apart
        assert 0 < client.ttl("headwater:auth-failures:bearer:203.0.113.9") <= 60  # the window ends by itself


def test_chart_samples_outlive_a_replica_and_are_taken_once_per_tick(tmp_path):
    from headwater.http.stats_history import RedisSampleHistory

    with redis_server(tmp_path) as url:
        client = redis.Redis.from_url(url)
        one, two = RedisSampleHistory(client, 1.0, keep=3), RedisSampleHistory(client, 1.0, keep=3)
        one.append({"t": 1.0, "done": 1})
        two.append({"t": 1.1, "done": 1})  # the same tick, from the other replica: not kept twice
        assert [s["t"] for s in RedisSampleHistory(client, 1.0, keep=3).load()] == [1.0]
        for n in range(2, 6):
            client.delete("headwater:stats:tick")  # the next tick
            one.append({"t": float(n), "done": n})
        assert [s["t"] for s in two.load()] == [3.0, 4.0, 5.0]  # the newest `keep`, oldest first

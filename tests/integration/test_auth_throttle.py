"""Wrong-token counts in a fleet live in Redis, so every serve replica behind a proxy sees the same ones."""

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

"""The fleet's crawl state in a real Redis: the query-variant budget that every fetch worker shares."""

from __future__ import annotations

import pytest
import redis

from connectors.web_urls import query_refusal
from headwater.fleet.crawl import ROBOTS_TTL_SECONDS, RedisCrawlState
from tests.services import redis_server

pytestmark = pytest.mark.integration


@pytest.mark.timeout(60)
def test_two_workers_count_into_one_query_budget_per_pass(tmp_path):
    with redis_server(tmp_path) as url:
        client = redis.Redis.from_url(url)
        first, second = RedisCrawlState(client, "docs"), RedisCrawlState(client, "docs")  # two fetch workers
        other_source = RedisCrawlState(client, "blog")
        calendar = [f"https://d.example/cal?day={day}" for day in range(5)]
        assert [query_refusal(u, first, 3) for u in calendar[:2]] == [None, None]
        assert query_refusal(calendar[2], second, 3) is None
        assert "more than 3 query variants of /cal" in query_refusal(calendar[3], second, 3)
        assert "more than 3 query variants" in query_refusal(calendar[4], first, 3)
        # A page delivered again (a redelivered fetch) counts nothing twice: its variants stay taken.
        assert query_refusal(calendar[0], second, 3) is None and query_refusal(calendar[0], first, 3) is None
        assert query_refusal("https://d.example/other?day=9", first, 3) is None  # each path its own budget
        assert query_refusal(calendar[4], other_source, 3) is None  # each source its own budget
        assert 0 < client.pttl(first.query_keys[0]) <= ROBOTS_TTL_SECONDS * 1000  # never left behind for good

        second.forget_query_variants()  # the next run's listing
        assert query_refusal(calendar[4], first, 3) is None
        assert not client.sismember(first.query_keys[0], "d.example/cal\nday=0")
        client.close()

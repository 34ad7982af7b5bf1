"""What a website crawl shares across fleet workers, in Redis: page records, robots.txt, sitemap lastmods,
the query-variant budget, per-host pacing.

Each fetch task builds its own connector, so a crawl's memory lives here: the validators and
links of every page (conditional requests and recrawls through 304s work across workers), the
robots.txt and sitemap lastmods the run's listing read, and one request schedule per host, so
that two workers (or twenty) together keep the host's delay, not each on its own.
"""

from __future__ import annotations

import json
import time
from typing import Any

from connectors.web_state import PageRecord
from headwater.fleet import keys

ROBOTS_TTL_SECONDS = 24 * 3600  # the listing of each run reads robots.txt anew; this only bounds a stale copy
PACE_TTL_MS = 3_600_000

# KEYS: the host's last-start key. ARGV: delay (s), ttl (ms). Reserves the first start at least `delay`
# after the last one (by Redis's own clock, the same for every worker) and returns how long the caller
# waits for it, in seconds.
_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local last = tonumber(redis.call('GET', KEYS[1]) or '-1e18')
local start = math.max(now, last + tonumber(ARGV[1]))
redis.call('SET', KEYS[1], string.format('%.6f', start), 'PX', ARGV[2])
return string.format('%.6f', start - now)
"""


class RedisPacer:
    """Request starts to a host at least `delay` apart across every worker sharing this Redis, and the
    host's adaptive delay (connectors.web_politeness decides it; every worker reads the same one)."""

    def __init__(self, redis: Any) -> None:
        self.redis = redis
        self._reserve = redis.register_script(_RESERVE)

    def wait_turn(self, host: str, delay: float) -> None:
        wait = float(self._reserve(keys=[f"{keys.PREFIX}crawl:host:{host}:last"], args=[delay, PACE_TTL_MS]))
        if wait > 0:
            time.sleep(wait)

    def delay(self, host: str) -> float | None:
        raw = self.redis.get(_delay_key(host))
        return float(raw) if raw is not None else None

    def set_delay(self, host: str, delay: float) -> None:
        self.redis.set(_delay_key(host), repr(delay), px=PACE_TTL_MS)


def _delay_key(host: str) -> str:
    return f"{keys.PREFIX}crawl:host:{host}:delay"


# KEYS: the pass's query strings taken (SET of "path\nquery"), their count per path (HASH).
# ARGV: path, query, limit, ttl (ms). 1: taken (or taken before); 0: the path's budget is spent.
_TAKE_QUERY = """
local member = ARGV[1] .. '\\n' .. ARGV[2]
if redis.call('SISMEMBER', KEYS[1], member) == 1 then return 1 end
if tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0') >= tonumber(ARGV[3]) then return 0 end
redis.call('SADD', KEYS[1], member)
redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return 1
"""


class RedisCrawlState:
    """A source's page records and robots.txt, shared by the fleet's fetches (HASH per source)."""

    def __init__(self, redis: Any, source_id: str) -> None:
        self.redis = redis
        self.pages_key = keys.source(source_id, "crawl-pages")
        self.robots_key = keys.source(source_id, "crawl-robots")
        self.lastmod_key = keys.source(source_id, "crawl-lastmod")
        # The pass's query-variant budget: every fetch worker counts into the same one, as embedded mode's
        # one process does (connectors.web_urls.query_refusal).
        self.query_keys = [keys.source(source_id, "crawl-queries"), keys.source(source_id, "crawl-query-counts")]
        self._take_query = redis.register_script(_TAKE_QUERY)

    def get(self, url: str) -> PageRecord | None:
        raw = self.redis.hget(self.pages_key, url)
        return PageRecord.from_json(json.loads(raw)) if raw else None

    def put(self, url: str, record: PageRecord) -> None:
        self.redis.hset(self.pages_key, url, json.dumps(record.to_json()))

    def drop(self, url: str) -> None:
        self.redis.hdel(self.pages_key, url)

    def save(self) -> None:
        pass  # every put is already shared

    def get_robots(self, host: str) -> str | None:
        raw = self.redis.hget(self.robots_key, host)
        return raw.decode() if isinstance(raw, bytes) else raw

    def put_robots(self, host: str, text: str) -> None:
        pipe = self.redis.pipeline()
        pipe.hset(self.robots_key, host, text)
        pipe.expire(self.robots_key, ROBOTS_TTL_SECONDS)
        pipe.execute()

    def set_lastmods(self, lastmods: dict[str, float]) -> None:
        # Written by a run's listing, read by its fetches: a page the sitemaps no longer date loses its lastmod.
        pipe = self.redis.pipeline()  # MULTI: a fetch never sees the hash half replaced
        pipe.delete(self.lastmod_key)
        if lastmods:
            pipe.hset(self.lastmod_key, mapping={url: repr(value) for url, value in lastmods.items()})
            pipe.expire(self.lastmod_key, ROBOTS_TTL_SECONDS)
        pipe.execute()

    def get_lastmod(self, url: str) -> float | None:
        raw = self.redis.hget(self.lastmod_key, url)
        return float(raw) if raw is not None else None

    def take_query_variant(self, path: str, query: str, limit: int) -> bool:
        # Idempotent for a query already taken, so a fetch that is delivered again counts nothing twice.
        return bool(self._take_query(keys=self.query_keys, args=[path, query, limit, ROBOTS_TTL_SECONDS * 1000]))

    def forget_query_variants(self) -> None:
        self.redis.delete(*self.query_keys)


def crawl_services(redis: Any, source_id: str) -> dict[str, Any]:
    """The connector options that make a web connector share its crawl through Redis."""
    return {"state": RedisCrawlState(redis, source_id), "pacer": RedisPacer(redis)}

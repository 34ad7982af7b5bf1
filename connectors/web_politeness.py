"""How often a crawl may ask one host, and which requests it need not send at all: decided here for both modes.

The delay between request starts to a host adapts to the host, as Scrapy's AutoThrottle does:

* the first request waits the source's `delay_seconds` after the previous one;
* each answer moves the delay halfway toward the host's latency (the time to its response headers)
  divided by TARGET_CONCURRENCY, and never below that latency, so about one request is in flight
  at a time whatever the crawl's concurrency: a fast server is asked quickly, a slow one slowly;
* 429 and 503 (the server asks for less) double the delay, to at least BACKOFF_FLOOR_SECONDS and
  at least the Retry-After it sent; other error answers never shorten it (they come back fast);
* never below robots.txt's Crawl-delay, never above MAX_DELAY_SECONDS.

Where the delay lives is the pacer's business (connectors.web_fetch.LocalPacer in one process,
headwater.fleet.crawl.RedisPacer for every worker of a fleet), so one host has one delay.

A page need not be requested at all when its sitemap `lastmod` is not newer than the one it had
when it was fetched (`unchanged_by_lastmod`): the crawl treats it as a 304.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

TARGET_CONCURRENCY = 1.0
MAX_DELAY_SECONDS = 60.0
BACKOFF_FLOOR_SECONDS = 1.0
BACKOFF_STATUSES = frozenset({429, 503})
# Answers that say something about the server's speed; an error page's latency does not.
_HEALTHY = frozenset({200, 203, 204, 206, 301, 302, 303, 304, 307, 308, 404, 410})


class HostPacer(Protocol):
    """Spaces requests to one host and keeps its adaptive delay (None before its first answer)."""

    def wait_turn(self, host: str, delay: float) -> None: ...

    def delay(self, host: str) -> float | None: ...

    def set_delay(self, host: str, delay: float) -> None: ...


class LocalPacer:
    """Politeness within one process: request starts to a host are at least `delay` apart.

    The gap is measured from the previous start with the delay known now, so the request that
    reads robots.txt is followed by its crawl-delay too.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._delays: dict[str, float] = {}

    def delay(self, host: str) -> float | None:
        with self._lock:
            return self._delays.get(host)

    def set_delay(self, host: str, delay: float) -> None:
        with self._lock:
            self._delays[host] = delay

    def wait_turn(self, host: str, delay: float) -> None:
        with self._lock:  # reserve a slot, then sleep outside the lock
            now = time.monotonic()
            last = self._last.get(host)
            start = now if last is None else max(now, last + delay)
            self._last[host] = start
        if start > now:
            time.sleep(start - now)


def next_delay(current: float, latency: float, status: int, retry_after: float | None = None) -> float:
    """The host's delay after an answer with this status that took `latency` seconds to start arriving."""
    if status in BACKOFF_STATUSES:
        return min(MAX_DELAY_SECONDS, max(current * 2, BACKOFF_FLOOR_SECONDS, retry_after or 0.0))
    target = latency / TARGET_CONCURRENCY
    moved = max(target, (current + target) / 2)
    if status not in _HEALTHY:
        moved = max(moved, current)
    return min(moved, MAX_DELAY_SECONDS)


class Throttle:
    """One crawl's view of its hosts' delays: waits before each request, learns from each answer."""

    def __init__(self, pacer: HostPacer, start_delay: float, floor: Callable[[str], float] = lambda host: 0.0) -> None:
        self.pacer = pacer
        self.start_delay = start_delay
        self.floor = floor  # robots.txt's Crawl-delay of a host, once read

    def current(self, host: str) -> float:
        """The gap before the next request to `host`: its adaptive delay, never below its Crawl-delay."""
        learned = self.pacer.delay(host)
        return max(self.start_delay if learned is None else learned, self.floor(host))

    def wait(self, host: str) -> None:
        self.pacer.wait_turn(host, self.current(host))

    def observed(self, host: str, latency: float, status: int, retry_after: float | None = None) -> None:
        learned = self.pacer.delay(host)
        current = self.start_delay if learned is None else learned
        self.pacer.set_delay(host, next_delay(current, latency, status, retry_after))


def unchanged_by_lastmod(fetched_lastmod: float | None, sitemap_lastmod: float | None) -> bool:
    """Whether the sitemap says a page is no newer than the copy fetched (both dates known)."""
    return fetched_lastmod is not None and sitemap_lastmod is not None and sitemap_lastmod <= fetched_lastmod

"""Crawl discovery: which URLs a crawl visits, and what it means for the pages it did not reach.

A connector that finds documents while fetching others (`connectors.base.Discoverer`: a website)
supplies the facts: its start URLs and sitemap pages, what fetching one URL found, and which URLs
its scope and robots.txt leave out. These functions make the decisions, once for both modes:

- `seeds`: where a crawl starts (the start URLs, then the sitemaps' pages);
- `candidates`: where a fetched page leads, each URL with its depth;
- `admit`: whether a candidate may join the crawl (scope, robots.txt, `max_depth`), and
  `Frontier.take` whether it does (each URL once, at most `max_pages` documents);
- `deletions`: which stored pages a finished crawl did not reach count as deleted.

Embedded mode executes them breadth first in one process (`headwater.sync.crawl_pass`); the fleet
admits the seeds in its list step, each page's candidates in its fetch step (the Lua behind
`FleetState.discover` is `Frontier.take` made atomic across workers) and applies `deletions` in its
finish step. A 404 of a page never fetched before is a broken link in the report, not a deletion:
the connector's read says so (`connectors.web`), in both modes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence

from connectors.base import Found

TOO_DEEP = "more than max_depth links from a start URL"
PAGE_LIMIT = "past max_pages"
ANOTHER_HOST = "another host"  # not worth a line in the report: most links of a site lead elsewhere


def seeds(start_urls: Sequence[str], sitemap_pages: Iterable[str]) -> list[str]:
    """Where a crawl starts: the start URLs, then every page the sitemaps list, each once, in that order."""
    return list(dict.fromkeys([*start_urls, *sitemap_pages]))


def candidates(found: Found, depth: int) -> list[tuple[str, int]]:
    """Where a fetched page leads, each URL with its depth (links from a start URL).

    A page indexed elsewhere (a redirect, a canonical URL) leads there at its own depth: it is the
    same document. A redirect's links are the target's, one link further; a page whose canonical URL
    is another leads only there (its links are the canonical page's, found when that is fetched).
    """
    out: list[tuple[str, int]] = []
    if found.elsewhere:
        out.append((found.elsewhere, depth))
    if found.elsewhere is None or found.elsewhere == found.uri:
        out += [(link, depth + 1) for link in found.links]
    first: dict[str, int] = {}
    for url, at in out:
        first.setdefault(url, at)
    return list(first.items())


def admit(url: str, depth: int, max_depth: int, refusal: Callable[[str], str | None]) -> str | None:
    """Why a candidate may not join the crawl (too deep; the source's scope or robots.txt), or None."""
    if depth > max_depth:
        return TOO_DEEP
    return refusal(url)


class Frontier:
    """One crawl's admissions, in one process: each URL once, at most `max_pages` documents, breadth first.

    The fleet keeps the same two rules in Redis (each uri once per run, at most max_pages documents),
    in one Lua script, because its fetches admit links concurrently.
    """

    def __init__(self, max_pages: int) -> None:
        self.max_pages = max_pages
        self.seen: set[str] = set()
        self.queue: deque[tuple[str, int]] = deque()
        # A URL was left out because of max_pages: the crawl did not see the whole site.
        self.truncated = False

    def take(self, url: str, depth: int, *, visit: bool = True) -> bool:
        """Admit a URL once; `visit=False` counts one whose content is already in hand (a redirect's target)."""
        if url in self.seen:
            return False
        if len(self.seen) >= self.max_pages:
            self.truncated = True
            return False
        self.seen.add(url)
        if visit:
            self.queue.append((url, depth))
        return True


def deletions(unreached: Iterable[str], gone: Iterable[str], complete: bool) -> list[str]:
    """Which stored pages that a finished crawl did not list count as deleted.

    `gone` answered 404 or 410 after they had been fetched before: deleted either way. The rest were
    simply not reached: after a complete crawl they are no longer linked (deleted); after one that
    max_pages cut short, nobody looked (kept until a crawl that reaches them or completes).
    """
    answered = set(gone)
    return [uri for uri in unreached if complete or uri in answered]

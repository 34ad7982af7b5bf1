"""Websites: a polite crawl for full syncs; conditional requests make a recrawl cost only what changed.

URIs are page URLs (normalised: no fragment, default port, tracking parameters dropped). A full
pass crawls from the start URLs and the sitemaps (those named in the options and in robots.txt),
within the allowed hosts, the include/exclude patterns, robots.txt, the depth and the page limit.
A page that answers 304, or whose sitemap lastmod is no newer than when it was fetched (then it
is not even asked for), is unchanged and never read; a page fetched before that now answers 404
or 410 is left out of the listing, so the pass deletes it; one never fetched before is a broken
link, listed so that the report names it (skipped, "broken link"); a page that could not be loaded
is listed as failed, and what was indexed of it stays. Request pacing adapts to each host
(connectors.web_politeness). Chunks carry the page's `url`, `title`, `fetched_at`, `lastmod`
(the sitemap's, else Last-Modified) and `etag`.

The connector supplies a crawl's facts (`connectors.base.Discoverer`: seeds, single visits, its
scope); which pages a crawl visits is decided in headwater.pipeline.discovery, and executed by
embedded mode's crawl pass (headwater.sync.crawl_pass) or by the fleet's steps, where each page's
fetch adds the links it found to the run, so the crawl fans out over the fetch workers.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from connectors.base import DocumentStat, SourceOptions, register_connector
from connectors.web_crawl import ROBOTS_DISALLOWED, Visit, Visitor, read_sitemaps
from connectors.web_fetch import DEFAULT_USER_AGENT, FetchPolicy, Fetcher
from connectors.web_politeness import HostPacer, LocalPacer, Throttle
from connectors.web_state import CrawlState, FileCrawlState, MemoryCrawlState
from connectors.web_fetch import FetchFailed, ResponseTooLarge
from connectors.web_urls import RefusedAddress, Scope, host_of, normalize, query_refusal
from headwater.errors import ConfigurationError, PermanentDocumentError, SkippedDocument
from headwater.models import DocumentChange, Op

log = logging.getLogger(__name__)

KIND = "web"


def _http_urls(urls: list[str], what: str) -> list[str]:
    for url in urls:
        if normalize(url) is None:
            raise ValueError(f"{url[:200]!r} is not an http(s) URL; {what} look like https://docs.example.com/")
        if "@" in url.partition("://")[2].split("/", 1)[0]:
            raise ValueError(f"{what} must not hold credentials")
    return urls


class WebOptions(SourceOptions):
    """A website: the pages reached from the start URLs and sitemaps, within the allowed hosts."""

    runtime = frozenset({"state", "pacer"})

    start_urls: list[str] = Field(min_length=1, max_length=100, description="Where the crawl starts.")
    sitemaps: list[str] = Field(default_factory=list, max_length=100,
                                description="Sitemaps to read besides those robots.txt names.")
    include: list[str] = Field(default_factory=list, max_length=100, description="Path patterns to crawl (default: all).")
    exclude: list[str] = Field(default_factory=list, max_length=100, description="Path patterns to leave out.")
    max_depth: int = Field(default=10, ge=0, le=1000, description="Links away from a start URL.")
    max_pages: int = Field(default=10_000, ge=1, le=10_000_000)
    allowed_hosts: list[str] | None = Field(default=None, max_length=100,
                                            description="Hosts the crawl may enter (default: the start URLs').")
    user_agent: str = Field(default=DEFAULT_USER_AGENT, min_length=1, max_length=300)
    concurrency: int = Field(default=2, ge=1, le=64, description="Pages fetched at once.")
    delay_seconds: float = Field(default=0.5, ge=0, le=3600, description="Between requests to one host "
                                                                         "(robots.txt's Crawl-delay wins when longer).")
    allow_private_addresses: bool = Field(default=False, description="Let the crawl reach private, loopback and "
                                                                     "link-local addresses (an intranet site).")
    timeout_seconds: float = Field(default=20.0, gt=0, le=600)
    retries: int = Field(default=2, ge=0, le=10)
    max_redirects: int = Field(default=5, ge=0, le=30)
    max_document_mb: float = Field(default=25.0, gt=0, le=10_000)

    @field_validator("start_urls", mode="before")
    @classmethod
    def _one_url_is_a_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("start_urls")
    @classmethod
    def _start_urls(cls, value: list[str]) -> list[str]:
        return _http_urls(value, "start URLs")

    @field_validator("sitemaps")
    @classmethod
    def _sitemaps(cls, value: list[str]) -> list[str]:
        return _http_urls(value, "sitemap URLs")

    @field_validator("include")
    @classmethod
    def _everything(cls, value: list[str]) -> list[str]:
        return [] if value == ["**"] else value  # the other kinds' "everything" (the command line's default)


class WebConnector:
    """A website: pages reached from the start URLs and sitemaps, within the allowed hosts."""

    kind = KIND

    def __init__(self, source_id: str, start_urls: Sequence[str] | str = (), *, sitemaps: Sequence[str] = (),
                 include: Sequence[str] = (), exclude: Sequence[str] = (), max_depth: int = 10,
                 max_pages: int = 10_000, allowed_hosts: Sequence[str] | None = None,
                 user_agent: str = DEFAULT_USER_AGENT, concurrency: int = 2, delay_seconds: float = 0.5,
                 allow_private_addresses: bool = False, timeout_seconds: float = 20.0, retries: int = 2,
                 max_redirects: int = 5, max_document_mb: float = 25.0,
                 state: CrawlState | None = None, pacer: HostPacer | None = None) -> None:
        self.source_id = source_id
        raw = [start_urls] if isinstance(start_urls, str) else list(start_urls)
        if not raw:
            raise ValueError(f"web source {source_id!r} needs at least one start URL (options.start_urls)")
        self.start_urls = []
        for url in raw:
            normalised = normalize(url)
            if normalised is None:
                raise ValueError(f"{url!r} is not an http(s) URL; start URLs look like https://docs.example.com/")
            self.start_urls.append(normalised)
        self.sitemaps = [u for u in (normalize(s) for s in sitemaps) if u]
        self.include, self.exclude = tuple(include), tuple(exclude)
        self.hosts = frozenset(h.lower() for h in allowed_hosts) if allowed_hosts else \
            frozenset(host_of(u) for u in self.start_urls)
        self.scope = Scope(self.hosts, self.include, self.exclude)
        if max_depth < 0 or max_pages < 1 or concurrency < 1 or delay_seconds < 0:
            raise ValueError("max_depth must be >= 0, max_pages and concurrency >= 1, delay_seconds >= 0")
        self.max_depth, self.max_pages = max_depth, max_pages
        self.concurrency, self.delay_seconds = concurrency, delay_seconds
        self.parallel_fetches = concurrency * max(1, len(self.hosts))  # `concurrency` is per host
        self.policy = FetchPolicy(user_agent=user_agent, allow_private_addresses=allow_private_addresses,
                                  timeout_seconds=timeout_seconds, retries=retries, max_redirects=max_redirects,
                                  max_bytes=int(max_document_mb * 1024 * 1024))
        self.state: CrawlState = state if state is not None else MemoryCrawlState()
        self.pacer: HostPacer = pacer or LocalPacer()
        # URLs left out of the crawl and why (robots.txt, patterns, traps), for reports and tests.
        self.refused: dict[str, str] = {}
        self._visits: dict[str, Visit] = {}
        self._visitor: Visitor | None = None

    @classmethod
    def url_options(cls, url: str) -> tuple[str, dict[str, Any]]:
        """`https://HOST/PATH` -> (the default source id: the URL, a crawl starting there within its host)."""
        start = normalize(url)
        if start is None:
            raise ValueError(f"{url} is not an http(s) URL")
        return start, {"start_urls": [start]}

    def keep_state_in(self, directory: Path) -> None:
        """Embedded mode: remember validators and links across passes in a file under `directory`."""
        if isinstance(self.state, MemoryCrawlState) and not isinstance(self.state, FileCrawlState):
            self.state = FileCrawlState(directory, self.source_id)

    def spec(self) -> dict:
        """What a worker needs to build the same connector (JSON)."""
        p = self.policy
        return {"kind": KIND, "id": self.source_id, "options": {
            "start_urls": self.start_urls, "sitemaps": self.sitemaps, "include": list(self.include),
            "exclude": list(self.exclude), "max_depth": self.max_depth, "max_pages": self.max_pages,
            "allowed_hosts": sorted(self.hosts), "user_agent": p.user_agent, "concurrency": self.concurrency,
            "delay_seconds": self.delay_seconds, "allow_private_addresses": p.allow_private_addresses,
            "timeout_seconds": p.timeout_seconds, "retries": p.retries, "max_redirects": p.max_redirects,
            "max_document_mb": p.max_bytes / 1024 / 1024}}

    @property
    def root(self) -> str:  # what `watch` and progress lines show for a source
        return self.start_urls[0]

    def refusal(self, url: str) -> str | None:
        """Why a URL is outside this source (another host, the patterns, a trap, robots.txt), or None."""
        return self.scope.refusal(url) or query_refusal(url, self.state) or \
            (None if self._robots_allow(url) else ROBOTS_DISALLOWED)

    def visitor(self) -> Visitor:
        if self._visitor is None:
            throttle = Throttle(self.pacer, self.delay_seconds)
            self._visitor = Visitor(self, Fetcher(self.policy, throttle))
            throttle.floor = self._visitor.robots.known_delay  # never faster than robots.txt's Crawl-delay
        return self._visitor

    def close(self) -> None:
        if self._visitor is not None:
            self._visitor.close()
            self._visitor = None

    # Discoverer: the facts of a crawl --------------------------------------------------------

    def seed_urls(self) -> tuple[list[str], list[str]]:
        """The start URLs, and the pages of the sitemaps (the options' and robots.txt's) with their lastmods kept."""
        self._visits.clear()
        self.state.forget_query_variants()  # per pass: more variants of one page's query string are a trap
        visitor = self.visitor()
        sitemap_urls = list(self.sitemaps)
        for start in self.start_urls:
            try:
                visitor.robots.rules(start, fresh=True)  # a pass reads robots.txt anew
                sitemap_urls += [u for u in visitor.robots.sitemaps(start) if u not in sitemap_urls]
            except (FetchFailed, RefusedAddress, ResponseTooLarge):
                pass  # the start URL's own visit fails and says why
        pages: list[str] = []
        lastmods: dict[str, float] = {}
        for page_url, lastmod in read_sitemaps(visitor.fetcher, sitemap_urls):
            url = normalize(page_url)
            if url:
                pages.append(url)
                if lastmod is not None:
                    lastmods.setdefault(url, lastmod)
        # Kept in the crawl state, where this pass's reads and a fleet's fetches (other connectors,
        # other processes) both find the dates the sitemaps gave.
        self.state.set_lastmods(lastmods)
        return list(self.start_urls), pages

    def visit(self, url: str) -> Visit:
        """Fetch one URL; what it found is kept for this connector's reads (under both its URLs when redirected)."""
        visit = self.visitor().visit(url)
        self._visits[url] = visit
        if visit.uri and visit.uri != url and visit.kind in ("page", "not_modified"):
            self._visits[visit.uri] = visit
        return visit

    def visited(self, uri: str) -> Visit | None:
        return self._visits.get(uri)

    def crawled(self, urls: Any) -> None:
        """A crawl of this source ended: the state forgets pages it no longer reaches, and is saved."""
        if hasattr(self.state, "retain"):  # a file's state (embedded); Redis keeps the fleet's
            self.state.retain(urls)
        self.state.save()

    # Reader ------------------------------------------------------------------------------------

    def _visit_of(self, uri: str) -> Visit:
        visit = self._visits.get(uri)
        if visit is None:  # not crawled by this connector (a fleet fetch, a live change): fetch it now
            visit = self.visit(uri)
        return visit

    def stat(self, uri: str) -> DocumentStat:
        visit = self._visit_of(uri)
        if visit.kind == "gone" and visit.broken:  # listed so that the report names it; nothing is deleted
            raise SkippedDocument(f"broken link: {visit.reason} (never indexed); fix or remove the links to it")
        if visit.kind == "gone":
            raise FileNotFoundError(uri)
        if visit.kind == "failed":
            raise PermanentDocumentError(visit.reason)
        if visit.kind == "skipped":
            raise SkippedDocument(visit.reason)
        if visit.uri not in (None, uri):  # the document is where it leads (discovery.candidates)
            raise SkippedDocument(f"redirects to {visit.uri}, where it is indexed")
        if visit.kind == "page" and visit.canonical_elsewhere:
            raise SkippedDocument(f"its canonical URL is {visit.canonical}, where it is indexed")
        lastmod = self.state.get_lastmod(uri)  # the sitemap's date (a fleet's listing left it in Redis)
        return DocumentStat(size=visit.size, modified_time=visit.modified_time or lastmod, version=visit.version,
                            mime_type=visit.mime_type, url=uri, metadata=page_metadata(visit, lastmod))

    def read(self, uri: str, limit: int) -> bytes:
        visit = self._visit_of(uri)
        if visit.kind == "not_modified":
            # The collection does not hold what the server says is current (a pass cut short after
            # the crawl state was saved): fetch it in full.
            visit = self._visits[uri] = self.visitor().visit(uri, conditional=False)
            self.stat(uri)  # raises what a failed refetch found
        if visit.body_path is None:
            raise FileNotFoundError(uri)
        with open(visit.body_path, "rb") as handle:
            return handle.read(limit)

    def watch(self, on_changes: Any, stop: Any) -> None:
        """Websites send no change events: a recrawl is how a web source learns what changed."""
        raise ConfigurationError(
            f"web source {self.source_id} has no change events to watch; run `headwater sync` again (a recrawl "
            "costs only what changed), or give the source a schedule in headwater.toml")

    def _robots_allow(self, url: str) -> bool:
        try:
            return self.visitor().robots.allowed(url)
        except Exception:  # noqa: BLE001  (rules unknown now: its own fetch decides and says why)
            return True


def page_metadata(visit: Visit, sitemap_lastmod: float | None) -> dict[str, str]:
    """What a page's chunks carry besides Headwater's own keys (`url` and `title` are set by the pipeline).

    Every value belongs to the response that produced the indexed content: a 304 writes nothing,
    so a recrawl that changes nothing leaves these keys, and the chunks, as they are.
    """
    lastmod = sitemap_lastmod if sitemap_lastmod is not None else visit.modified_time
    found = {"fetched_at": visit.fetched_at, "etag": visit.etag,
             "lastmod": datetime.fromtimestamp(lastmod, timezone.utc).isoformat(timespec="seconds")
             if lastmod is not None else None}
    return {key: value for key, value in found.items() if value}


register_connector(KIND, WebConnector, WebOptions, url_schemes=("http", "https"))

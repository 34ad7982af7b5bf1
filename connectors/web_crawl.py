"""Fetching a website's pages for a crawl: robots.txt, sitemaps, and single visits, each polite.

A page is visited with a conditional request when the crawl state knows its validators. What a
visit found is kept for the pass (the body spooled to disk), so the pipeline reads a changed page
without fetching it again, and an unchanged one (304) is never read at all. Which pages a crawl
visits is decided in headwater.pipeline.discovery, not here.
"""

from __future__ import annotations

import dataclasses
import email.utils
import hashlib
import logging
import tempfile
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from connectors.web_fetch import Fetcher, FetchFailed, Response, ResponseTooLarge, Validators
from connectors.web_politeness import unchanged_by_lastmod
from connectors.web_state import PageRecord
from connectors.web_urls import RefusedAddress, extract_links, host_of, normalize

if TYPE_CHECKING:
    from connectors.web import WebConnector

log = logging.getLogger(__name__)

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
ROBOTS_DISALLOWED = "disallowed by robots.txt"
# Documents linked from a site that go through the same parsers as files.
DOCUMENT_TYPES = frozenset({
    "application/pdf", "text/plain", "text/markdown", "text/csv", "application/json",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation",
})


@dataclass
class Visit:
    """What fetching one URL found."""

    url: str  # as requested
    kind: str  # page | not_modified | gone | failed | skipped
    uri: str | None = None  # the document's URL (after redirects)
    version: str | None = None
    mime_type: str | None = None
    modified_time: float | None = None
    size: int = 0
    body_path: Path | None = None
    links: list[str] = field(default_factory=list)
    canonical: str | None = None
    reason: str = ""
    record: PageRecord | None = None
    etag: str | None = None
    fetched_at: str | None = None  # when the response behind this version came (ISO 8601, UTC)
    # Gone (404/410) and never fetched before: a link to nothing, reported, not a deletion.
    broken: bool = False
    # The page names another page in scope as its canonical URL: that one is indexed, not this one.
    canonical_elsewhere: bool = False

    @property
    def elsewhere(self) -> str | None:
        """The URL this document is indexed under instead of its own: where it redirects, or its canonical URL."""
        if self.uri and self.uri != self.url:
            return self.uri
        return self.canonical if self.canonical_elsewhere else None


class Robots:
    """robots.txt of each host, read once per crawl (protego)."""

    def __init__(self, fetcher: Fetcher, user_agent: str, state: Any) -> None:
        self.fetcher = fetcher
        self.user_agent = user_agent
        self.state = state  # where a fleet's fetches share the rules the run's listing read
        self._rules: dict[str, Any] = {}
        self._lock = threading.Lock()

    def rules(self, url: str, fresh: bool = False) -> Any:
        """The parsed robots.txt of the URL's host; raises FetchFailed when the host's rules cannot be known."""
        from urllib.parse import urlsplit

        from protego import Protego

        host = host_of(url)
        with self._lock:
            if host not in self._rules:
                text = None if fresh else self.state.get_robots(host)
                if text is None:
                    scheme = urlsplit(url).scheme
                    response = self.fetcher.get(f"{scheme}://{host}/robots.txt")
                    # 4xx: no rules (RFC 9309); 5xx was retried and raised; redirects were followed.
                    text = response.body.decode("utf-8", "replace") if response.status == 200 else ""
                    self.state.put_robots(host, text)
                self._rules[host] = Protego.parse(text)
            return self._rules[host]

    def known_delay(self, host: str) -> float:
        """The host's crawl-delay once its robots.txt has been read (0 before: that first request has no gap)."""
        rules = self._rules.get(host)
        return float(rules.crawl_delay(self.user_agent) or 0.0) if rules is not None else 0.0

    def allowed(self, url: str) -> bool:
        return self.rules(url).can_fetch(url, self.user_agent)

    def crawl_delay(self, url: str) -> float:
        return float(self.rules(url).crawl_delay(self.user_agent) or 0.0)

    def sitemaps(self, url: str) -> list[str]:
        return list(self.rules(url).sitemaps)


def page_version(response: Response) -> str:
    """The page's fingerprint: its ETag, else its Last-Modified, else the hash of its bytes."""
    etag = response.headers.get("etag")
    if etag:
        return f"etag:{etag}"
    last_modified = response.headers.get("last-modified")
    if last_modified:
        return f"lm:{last_modified}"
    return "sha256:" + hashlib.sha256(response.body).hexdigest()[:32]


def http_time(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None


class Visitor:
    """Fetches single URLs for a connector and says what each one is; shared by the crawl and the fleet's fetches."""

    def __init__(self, connector: WebConnector, fetcher: Fetcher) -> None:
        self.connector = connector
        self.fetcher = fetcher
        self.robots = Robots(fetcher, connector.policy.user_agent, connector.state)
        self._spool = tempfile.TemporaryDirectory(prefix="headwater-web-")

    def close(self) -> None:
        self.fetcher.close()
        self._spool.cleanup()

    def visit(self, url: str, conditional: bool = True) -> Visit:
        state = self.connector.state
        prior = state.get(url) if conditional else None
        try:
            if not self.robots.allowed(url):
                return Visit(url, "skipped", reason=ROBOTS_DISALLOWED)
            if prior is not None and unchanged_by_lastmod(prior.lastmod, state.get_lastmod(url)):
                return self._unchanged(url, url, prior)  # the sitemap says so: no request at all
            response = self.fetcher.get(url, self._validators if conditional else None)
            uri = normalize(response.url) or url
            if response.redirects:  # where it leads must be in the crawl too
                refusal = self.connector.refusal(uri) or (None if self.robots.allowed(uri) else ROBOTS_DISALLOWED)
                if refusal:
                    return Visit(url, "skipped", reason=f"redirects to {uri} ({refusal})")
                prior = state.get(uri) if conditional else None
        except RefusedAddress as exc:
            return Visit(url, "failed", uri=url, reason=str(exc))
        except FetchFailed as exc:
            return self._failed(url, prior, f"could not be fetched: {exc}; the indexed copy, if any, is kept")
        except ResponseTooLarge as exc:
            return self._failed(url, prior, str(exc))
        if response.status == 304 and prior is not None:
            lastmod = state.get_lastmod(uri)
            if lastmod is not None and lastmod != prior.lastmod:  # the next pass may skip the request
                prior = dataclasses.replace(prior, lastmod=lastmod)
                state.put(uri, prior)
            return self._unchanged(url, uri, prior)
        if response.status in (404, 410):
            fetched_before = state.get(uri) is not None
            state.drop(uri)
            return Visit(url, "gone", uri=uri, reason=f"HTTP {response.status}", broken=not fetched_before)
        if response.status != 200:
            return self._failed(url, prior, f"HTTP {response.status}; the indexed copy, if any, is kept")
        return self._page(url, uri, response)

    @staticmethod
    def _unchanged(url: str, uri: str, prior: PageRecord) -> Visit:
        """The page as it was last fetched (a 304, or a sitemap lastmod no newer than that fetch's)."""
        return Visit(url, "not_modified", uri=uri, version=prior.version, mime_type=prior.mime_type,
                     links=list(prior.links), record=prior, etag=prior.etag, fetched_at=prior.fetched_at,
                     modified_time=http_time(prior.last_modified))

    def _validators(self, url: str) -> Validators | None:
        record = self.connector.state.get(normalize(url) or url)
        return Validators(record.etag, record.last_modified) if record else None

    def _failed(self, url: str, prior: PageRecord | None, reason: str) -> Visit:
        # Its links from the last pass keep the pages behind it in the crawl.
        return Visit(url, "failed", uri=url, reason=reason, links=list(prior.links) if prior else [])

    def _page(self, url: str, uri: str, response: Response) -> Visit:
        mime = response.content_type or "application/octet-stream"
        links: list[str] = []
        canonical = None
        if mime in HTML_TYPES:
            found = extract_links(response.body, uri)
            links, canonical = list(found.links), found.canonical
        elif mime not in DOCUMENT_TYPES:
            return Visit(url, "skipped", uri=uri, reason=f"{mime} is not indexed")
        version = page_version(response)
        canonical_elsewhere = bool(canonical and canonical != uri and not self.connector.refusal(canonical))
        fetched_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        record = PageRecord(version=version, etag=response.headers.get("etag"),
                            last_modified=response.headers.get("last-modified"), links=links, mime_type=mime,
                            fetched_at=fetched_at, lastmod=self.connector.state.get_lastmod(uri))
        self.connector.state.put(uri, record)
        body_path = Path(self._spool.name) / hashlib.sha256(uri.encode()).hexdigest()
        body_path.write_bytes(response.body)
        return Visit(url, "page", uri=uri, version=version, mime_type=mime, size=len(response.body),
                     modified_time=http_time(response.headers.get("last-modified")), body_path=body_path,
                     links=links, canonical=canonical, record=record, etag=record.etag, fetched_at=fetched_at,
                     canonical_elsewhere=canonical_elsewhere)


def read_sitemaps(fetcher: Fetcher, urls: list[str]) -> list[tuple[str, float | None]]:
    """Every page of these sitemaps (indexes followed, gzip read) with its lastmod, by ultimate-sitemap-parser."""
    from usp.fetch_parse import SitemapFetcher
    from usp.objects.sitemap import InvalidSitemap

    pages: list[tuple[str, float | None]] = []
    for url in dict.fromkeys(urls):
        tree = SitemapFetcher(url, recursion_level=0, web_client=_SitemapClient(fetcher)).sitemap()
        if isinstance(tree, InvalidSitemap):
            log.warning("sitemap %s could not be read: %s", url, tree.reason)
            continue
        for page in tree.all_pages():
            lastmod = page.last_modified.timestamp() if page.last_modified else None
            pages.append((page.url, lastmod))
    return pages


def _sitemap_client_classes():  # noqa: ANN202  (usp is imported only when a crawl reads sitemaps)
    from usp.web_client.abstract_client import (AbstractWebClient, AbstractWebClientSuccessResponse,
                                                WebClientErrorResponse)

    class Success(AbstractWebClientSuccessResponse):
        def __init__(self, response: Response) -> None:
            self._response = response

        def status_code(self) -> int:
            return self._response.status

        def status_message(self) -> str:
            return "OK"

        def header(self, case_insensitive_name: str) -> str | None:
            return self._response.headers.get(case_insensitive_name)

        def raw_data(self) -> bytes:
            return self._response.body

        def url(self) -> str:
            return self._response.url

    class Error(WebClientErrorResponse):
        pass

    class Client(AbstractWebClient):
        """usp fetches through the crawl's Fetcher: the same address checks, pacing and limits as pages."""

        def __init__(self, fetcher: Fetcher) -> None:
            self.fetcher = fetcher

        def set_max_response_data_length(self, max_response_data_length: int | None) -> None:
            pass  # the Fetcher's own limit applies

        def get(self, url: str) -> Any:
            try:
                response = self.fetcher.get(url)
            except (RefusedAddress, FetchFailed, ResponseTooLarge) as exc:
                return Error(str(exc), retryable=False)
            if response.status != 200:
                return Error(f"HTTP {response.status}", retryable=False)
            return Success(response)

    return Client


def _SitemapClient(fetcher: Fetcher) -> Any:  # noqa: N802
    return _sitemap_client_classes()(fetcher)


"""HTTP for the website connector: safe addresses on every hop, politeness, conditional requests, retries.

Every request goes to an address checked after DNS resolution, and to that very address (the URL
is pinned to the IP, with the Host header and TLS server name of the original host), so a name
that resolves differently a moment later (DNS rebinding) cannot steer a request elsewhere.
Redirects are followed here, one hop at a time, each hop checked the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx

from connectors.web_politeness import LocalPacer, Throttle
from connectors.web_urls import RefusedAddress, host_of, safe_addresses
from headwater.backoff import backoff_delay, retry_after_seconds

DEFAULT_USER_AGENT = "HeadwaterBot/0.1 (+https://github.com/headwater/headwater)"
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
MAX_RETRY_AFTER_SECONDS = 120.0


class FetchFailed(Exception):
    """The page could not be loaded (timeouts, connection errors, 5xx) after the retries."""


class ResponseTooLarge(Exception):
    """The response is larger than the configured limit."""


@dataclass(frozen=True)
class Validators:
    """What a conditional request sends: the ETag and Last-Modified of the copy already indexed."""

    etag: str | None = None
    last_modified: str | None = None

    def headers(self) -> dict[str, str]:
        headers = {}
        if self.etag:
            headers["If-None-Match"] = self.etag
        if self.last_modified:
            headers["If-Modified-Since"] = self.last_modified
        return headers


@dataclass
class Response:
    url: str  # where the content came from, after redirects
    status: int
    headers: httpx.Headers
    body: bytes = b""
    redirects: list[str] = field(default_factory=list)

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()


@dataclass
class FetchPolicy:
    user_agent: str = DEFAULT_USER_AGENT
    allow_private_addresses: bool = False
    timeout_seconds: float = 20.0
    retries: int = 2
    backoff_seconds: float = 0.5
    max_redirects: int = 5
    max_bytes: int = 25 * 1024 * 1024


class Fetcher:
    """GETs with every safety and politeness rule applied; one httpx client (connection pool) per crawl."""

    def __init__(self, policy: FetchPolicy, throttle: Throttle | None = None) -> None:
        self.policy = policy
        self.throttle = throttle or Throttle(LocalPacer(), 0.0)
        self.requests = 0
        # Redirects are followed by hand (each hop is checked); proxies from the environment are not
        # used, since the address check must see the address actually connected to.
        self.client = httpx.Client(timeout=httpx.Timeout(policy.timeout_seconds), follow_redirects=False,
                                   trust_env=False, headers={"User-Agent": policy.user_agent})

    def close(self) -> None:
        self.client.close()

    def get(self, url: str, validators_for: Callable[[str], Validators | None] | None = None) -> Response:
        """The response at the end of at most max_redirects redirects; raises RefusedAddress,
        FetchFailed or ResponseTooLarge. `validators_for(url)` makes each hop conditional on the
        copy of that URL already held (a redirect's target has its own)."""
        redirects: list[str] = []
        current = url
        for _ in range(self.policy.max_redirects + 1):
            response = self._get_with_retries(current, validators_for(current) if validators_for else None)
            if response.status not in REDIRECT_STATUSES or "location" not in response.headers:
                response.redirects = redirects
                return response
            redirects.append(current)
            target = urljoin(current, response.headers["location"])
            if urlsplit(target).scheme not in ("http", "https"):
                raise RefusedAddress(f"refused {url}: it redirects to {target}, which is not http(s)")
            current = target
        raise FetchFailed(f"more than {self.policy.max_redirects} redirects (last: {current})")

    def _get_with_retries(self, url: str, validators: Validators | None) -> Response:
        attempt = 0
        while True:
            try:
                response = self._get_once(url, validators)
            except (httpx.TimeoutException, httpx.TransportError, ConnectionError) as exc:
                if attempt >= self.policy.retries:
                    raise FetchFailed(f"{_describe(exc)} after {attempt + 1} attempts") from None
                wait = self._backoff(attempt)
            else:
                if response.status not in RETRY_STATUSES:
                    return response
                if attempt >= self.policy.retries:
                    raise FetchFailed(f"HTTP {response.status} after {attempt + 1} attempts")
                wait = retry_after_seconds(response.headers.get("retry-after"), MAX_RETRY_AFTER_SECONDS) or self._backoff(attempt)
            attempt += 1
            time.sleep(wait)

    def _backoff(self, attempt: int) -> float:
        return backoff_delay(attempt, self.policy.backoff_seconds)

    def _get_once(self, url: str, validators: Validators | None) -> Response:
        parts = urlsplit(url)
        address = safe_addresses(url, self.policy.allow_private_addresses)[0]
        host = host_of(url)
        pinned_host = f"[{address}]" if ":" in address else address
        netloc = pinned_host + (f":{parts.port}" if parts.port else "")
        pinned = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
        headers = {"Host": parts.netloc, **(validators.headers() if validators else {})}
        extensions = {"sni_hostname": parts.hostname} if parts.scheme == "https" else {}
        self.throttle.wait(host)
        self.requests += 1
        sent = time.monotonic()
        with self.client.stream("GET", pinned, headers=headers, extensions=extensions) as reply:
            # The time to the headers is the server's latency (a large body's transfer is not).
            self.throttle.observed(host, time.monotonic() - sent, reply.status_code,
                                   retry_after_seconds(reply.headers.get("retry-after"), MAX_RETRY_AFTER_SECONDS))
            body = b""
            if reply.status_code == 200:
                declared = int(reply.headers.get("content-length") or 0)
                if declared > self.policy.max_bytes:
                    raise ResponseTooLarge(_too_large(declared, self.policy.max_bytes))
                chunks, size = [], 0
                for chunk in reply.iter_bytes():
                    size += len(chunk)
                    if size > self.policy.max_bytes:
                        raise ResponseTooLarge(_too_large(size, self.policy.max_bytes))
                    chunks.append(chunk)
                body = b"".join(chunks)
            return Response(url=url, status=reply.status_code, headers=reply.headers, body=body)


def _too_large(size: int, limit: int) -> str:
    return (f"the response ({size / 1048576:.1f} MB or more) is above the {limit / 1048576:.0f} MB limit; "
            "raise HEADWATER_MAX_DOCUMENT_MB or exclude the URL")


def _describe(exc: Exception) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    return f"connection failed ({type(exc).__name__})"

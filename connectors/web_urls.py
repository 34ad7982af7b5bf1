"""Website URLs: normalisation, what a crawl may visit (hosts, patterns, traps), links out of a page, safe addresses."""

from __future__ import annotations

import fnmatch
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urldefrag, urljoin, urlsplit, urlunsplit

import courlan

from connectors.web_state import CrawlState

# Beyond these a URL is almost always generated (calendars, session ids, faceted search), not a page.
MAX_URL_LENGTH = 2000
MAX_SEGMENT_REPEATS = 3  # /a/b/a/b/a/b/... : relative links that resolve against themselves
MAX_QUERY_PARAMS = 8
MAX_QUERY_VARIANTS = 50  # distinct query strings per path before further ones are treated as a trap
# Instance metadata services: never a documentation site, always a credentials leak. Refused even
# when a source allows private addresses.
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254"))
_SHARED_ADDRESS_SPACE = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT: not the public internet


class RefusedAddress(Exception):
    """A URL whose host is, or resolves to, an address this source may not reach."""


def normalize(url: str, base: str | None = None) -> str | None:
    """The one spelling of a URL: absolute, no fragment, dot segments resolved, default port, tracking
    parameters and empty query dropped, query parameters sorted (courlan). None if not http(s)."""
    absolute = urljoin(base, url.strip()) if base else url.strip()
    absolute, _ = urldefrag(absolute)
    parts = urlsplit(absolute)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    # urljoin resolves "." and ".." only against a base; join the path with itself to resolve them always.
    path = urlsplit(urljoin(f"{parts.scheme}://{parts.netloc}/", parts.path or "/")).path
    rebuilt = urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))
    try:
        return courlan.normalize_url(rebuilt)
    except (ValueError, AttributeError):
        return None


def host_of(url: str) -> str:
    """host[:port] as the crawl keys politeness by (a server is a host and a port)."""
    return urlsplit(url).netloc.lower()


@dataclass(frozen=True)
class Scope:
    """Which URLs a crawl may fetch: its hosts, include/exclude patterns and trap limits."""

    hosts: frozenset[str]
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def refusal(self, url: str) -> str | None:
        """Why this (normalised) URL is out of the crawl, or None if it is in."""
        parts = urlsplit(url)
        if parts.netloc.lower() not in self.hosts and (parts.hostname or "").lower() not in self.hosts:
            return "another host"
        if self.include and not any(_matches(url, p) for p in self.include):
            return "not matched by include"
        if any(_matches(url, p) for p in self.exclude):
            return "matched by exclude"
        return trap_refusal(url)


def _matches(url: str, pattern: str) -> bool:
    """A glob against the whole URL, or against its path when the pattern starts with '/'."""
    target = urlsplit(url).path if pattern.startswith("/") else url
    return fnmatch.fnmatchcase(target, pattern)


def trap_refusal(url: str) -> str | None:
    """Why a URL looks like a crawler trap (too long, a path repeating itself, too many parameters)."""
    if len(url) > MAX_URL_LENGTH:
        return f"trap: URL longer than {MAX_URL_LENGTH} characters"
    parts = urlsplit(url)
    segments = [s for s in parts.path.split("/") if s]
    counts: dict[str, int] = {}
    for segment in segments:
        counts[segment] = counts.get(segment, 0) + 1
        if counts[segment] > MAX_SEGMENT_REPEATS:
            return f"trap: path segment {segment!r} repeats more than {MAX_SEGMENT_REPEATS} times"
    if parts.query and parts.query.count("&") + 1 > MAX_QUERY_PARAMS:
        return f"trap: more than {MAX_QUERY_PARAMS} query parameters"
    return None


def query_refusal(url: str, state: CrawlState, limit: int = MAX_QUERY_VARIANTS) -> str | None:
    """Past `limit` distinct query strings of one path in a pass, more variants of that page are a trap.

    The count is the crawl state's: one process's in embedded mode, the fleet's in Redis, shared by every
    fetch worker, so both modes refuse the same variants whichever page links to them.
    """
    parts = urlsplit(url)
    if not parts.query or state.take_query_variant(f"{parts.netloc}{parts.path}", parts.query, limit):
        return None
    return f"trap: more than {limit} query variants of {parts.path}"


@dataclass(frozen=True)
class PageLinks:
    links: tuple[str, ...]
    canonical: str | None


def extract_links(html: bytes, url: str) -> PageLinks:
    """Normalised links of an HTML page (a, area, link rel=alternate... no scripts or styles) and its canonical URL."""
    import lxml.html

    try:
        tree = lxml.html.fromstring(html)
    except (ValueError, lxml.etree.ParserError):  # type: ignore[attr-defined]
        return PageLinks((), None)
    base = url
    for href in tree.xpath("//base/@href")[:1]:
        base = urljoin(url, href)
    if any("nofollow" in (c or "").lower() for c in tree.xpath("//meta[@name='robots']/@content")):
        links: list[str] = []
    else:
        links = [h for h in tree.xpath("//a[@href]/@href | //area[@href]/@href")
                 if not h.lower().startswith(("javascript:", "mailto:", "tel:", "data:"))]
    canonical = None
    for href in tree.xpath("//link[@rel='canonical']/@href")[:1]:
        canonical = normalize(href, base)
    seen: dict[str, None] = {}
    for href in links:
        normalised = normalize(href, base)
        if normalised:
            seen.setdefault(normalised, None)
    return PageLinks(tuple(seen), canonical)


# Addresses -----------------------------------------------------------------------------------

def address_refusal(address: str, allow_private: bool) -> str | None:
    """Why a crawl may not connect to this IP address, or None if it may."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    if ip in METADATA_ADDRESSES:
        return f"{ip} is a cloud metadata address"
    if allow_private:
        return None
    for test, what in ((ip.is_loopback, "a loopback"), (ip.is_link_local, "a link-local"),
                       (ip.is_private, "a private"), (ip in _SHARED_ADDRESS_SPACE, "a shared (carrier NAT)"),
                       (ip.is_multicast, "a multicast"), (ip.is_reserved, "a reserved"),
                       (ip.is_unspecified, "an unspecified")):
        if test:
            return (f"{ip} is {what} address; set allow_private_addresses on the source "
                    "(--allow-private-addresses) if it is meant to crawl an internal site")
    return None


def resolve(host: str, port: int) -> list[str]:
    """Every address a host name resolves to (an IP literal resolves to itself)."""
    try:
        return [ipaddress.ip_address(host.strip("[]")).compressed]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConnectionError(f"cannot resolve {host} ({exc.strerror})") from None
    return list(dict.fromkeys(info[4][0] for info in infos))


def safe_addresses(url: str, allow_private: bool) -> list[str]:
    """The addresses a URL's host resolves to, all of them allowed; raises RefusedAddress otherwise.

    Every address is checked, not only the first: a host that resolves to one public and one
    private address could otherwise be steered to the private one.
    """
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    addresses = resolve(parts.hostname or "", port)
    for address in addresses:
        reason = address_refusal(address, allow_private)
        if reason:
            via = "" if (parts.hostname or "").strip("[]") == address else f" ({parts.hostname} resolves to {address})"
            raise RefusedAddress(f"refused {url}{via}: {reason}")
    return addresses


"""A real HTTP server on loopback for web-source tests and benchmarks: routes or a directory, with a request log.

Every response carries an ETag (the hash of its body) and a Last-Modified, and conditional
requests are answered 304, as a static web server does. Routes can be changed, removed, delayed,
held or redirected while the server runs; every request is logged (time, path, status, whether it was
conditional) so tests assert on what the server saw.
"""

from __future__ import annotations

import email.utils
import gzip
import hashlib
import mimetypes
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit


HOLD_LIMIT_SECONDS = 120.0  # a held request is answered by then even if a test forgot to release it


@dataclass
class Route:
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    status: int = 200
    location: str | None = None  # for redirects
    delay: float = 0.0  # seconds before answering (a slow page)
    # Set: answered only once it is set (a hanging page, released by the test; never past HOLD_LIMIT_SECONDS).
    hold: threading.Event | None = None
    modified: float = field(default_factory=time.time)
    # Answers given before the real one, one per request: (status, headers), e.g. a 503 with Retry-After.
    failures: list[tuple[int, dict[str, str]]] = field(default_factory=list)


@dataclass(frozen=True)
class Logged:
    at: float
    path: str
    status: int
    conditional: bool
    user_agent: str


class Site:
    """The server's content and its request log (shared with the handler threads)."""

    def __init__(self, root: Path | None = None) -> None:
        self.routes: dict[str, Route] = {}
        # path prefix -> function of the path: pages made up on request (an endless link trap)
        self.generated: dict[str, Callable[[str], Route]] = {}
        self.root = root
        self.log: list[Logged] = []
        self.lock = threading.Lock()
        self.port = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return self.base + path

    def page(self, path: str, body: str | bytes, content_type: str = "text/html; charset=utf-8") -> None:
        data = body.encode() if isinstance(body, str) else body
        with self.lock:
            self.routes[path] = Route(data, content_type)

    def redirect(self, path: str, location: str, status: int = 301) -> None:
        with self.lock:
            self.routes[path] = Route(status=status, location=location)

    def remove(self, path: str) -> None:
        with self.lock:
            self.routes.pop(path, None)

    def fail_next(self, path: str, status: int, times: int = 1, headers: dict[str, str] | None = None) -> None:
        with self.lock:
            self.routes[path].failures.extend([(status, headers or {})] * times)

    def delay(self, path: str, seconds: float) -> None:
        with self.lock:
            self.routes[path].delay = seconds

    def hold(self, path: str) -> threading.Event:
        """Answer `path` only once the returned event is set: a page that hangs as long as the test needs."""
        event = threading.Event()
        with self.lock:
            self.routes[path].hold = event
        return event

    def release(self) -> None:
        """Let every held request be answered (and the held routes answer at once from now on)."""
        with self.lock:
            for route in self.routes.values():
                if route.hold is not None:
                    route.hold.set()

    def requests(self, path: str | None = None) -> list[Logged]:
        with self.lock:
            return [r for r in self.log if path is None or r.path == path]

    def clear_log(self) -> None:
        with self.lock:
            self.log.clear()

    def route(self, path: str) -> Route | None:
        with self.lock:
            route = self.routes.get(path)
            make = next((f for prefix, f in self.generated.items() if path.startswith(prefix)), None)
        if route is None and make is not None:
            return make(path)
        if route is not None or self.root is None:
            return route
        file = (self.root / path.lstrip("/")).resolve()
        if file.is_dir():
            file = file / "index.html"
        if self.root.resolve() not in file.parents or not file.is_file():
            return None
        kind = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
        if kind.startswith("text/"):
            kind += "; charset=utf-8"
        return Route(file.read_bytes(), kind, modified=file.stat().st_mtime)


def _handler(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args) -> None:  # noqa: A002  (quiet: the Site keeps a log)
            pass

        def do_GET(self) -> None:  # noqa: N802
            arrived = time.monotonic()
            path = urlsplit(self.path).path
            route = site.route(path)
            conditional = "If-None-Match" in self.headers or "If-Modified-Since" in self.headers
            if route is not None and route.delay:
                time.sleep(route.delay)
            if route is not None and route.hold is not None:
                route.hold.wait(HOLD_LIMIT_SECONDS)
            status, headers, body = self._answer(route)
            with site.lock:
                site.log.append(Logged(arrived, path, status, conditional,
                                       self.headers.get("User-Agent", "")))
            try:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test)

        def _answer(self, route: Route | None) -> tuple[int, dict[str, str], bytes]:
            if route is None:
                return 404, {"Content-Type": "text/plain"}, b"not found"
            if route.location is not None:
                return route.status, {"Location": route.location}, b""
            with site.lock:
                failure = route.failures.pop(0) if route.failures else None
            if failure is not None:
                return failure[0], failure[1], b"failing on purpose"
            etag = '"' + hashlib.sha256(route.body).hexdigest()[:16] + '"'
            modified = email.utils.formatdate(route.modified, usegmt=True)
            headers = {"Content-Type": route.content_type, "ETag": etag, "Last-Modified": modified}
            if self.headers.get("If-None-Match") == etag:
                return 304, {"ETag": etag}, b""
            since = self.headers.get("If-Modified-Since")
            if since and "If-None-Match" not in self.headers:
                try:
                    if email.utils.parsedate_to_datetime(since).timestamp() >= int(route.modified):
                        return 304, {"ETag": etag}, b""
                except (TypeError, ValueError):
                    pass
            return route.status, headers, route.body

    return Handler


@contextmanager
def serve(site: Site) -> Iterator[Site]:
    """Serve the site on a free loopback port until the block ends (health-checked before it starts)."""
    import urllib.request

    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(site))
    server.daemon_threads = True
    site.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, name="test-web-site", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while True:  # health check: the server answers (any status) before a test uses it
            try:
                urllib.request.urlopen(site.url("/__health"), timeout=1)
            except urllib.error.HTTPError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the test web server did not start") from None
                time.sleep(0.05)
        site.clear_log()
        yield site
    finally:
        site.release()
        server.shutdown()
        server.server_close()


def gzipped(data: str) -> bytes:
    return gzip.compress(data.encode())


def sitemap_index(*urls: str) -> str:
    entries = "".join(f"<sitemap><loc>{u}</loc></sitemap>" for u in urls)
    return f'<?xml version="1.0" encoding="UTF-8"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</sitemapindex>'


def urlset(*entries: tuple[str, str | None]) -> str:
    items = "".join(f"<url><loc>{u}</loc>" + (f"<lastmod>{m}</lastmod>" if m else "") + "</url>" for u, m in entries)
    return f'<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{items}</urlset>'

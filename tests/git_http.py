"""A private repository over HTTP for tests: `git http-backend` (git's own smart-HTTP server) behind a
loopback server that wants a token the way GitHub takes one (basic auth, the token as password)."""

from __future__ import annotations

import base64
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@contextmanager
def private_git_server(root: Path, token: str, gate: Callable[[], int | None] | None = None
                       ) -> Iterator[tuple[str, list[str]]]:
    """Serves the bare repositories under `root`; yields (base URL, Authorization headers it received).

    `gate`, when given, is called before each request is served: it may block (to hold a fetch where
    a test wants it), and returns None to serve the request or an HTTP status to answer instead.
    """
    expected = "Basic " + base64.b64encode(f"x-access-token:{token}".encode()).decode()
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # quiet
            return

        def _serve(self) -> None:
            authorization = self.headers.get("Authorization", "")
            seen.append(authorization)
            if authorization != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="private"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            path, _, query = self.path.partition("?")
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            refused = gate() if gate is not None else None
            if refused is not None:
                self.send_response(refused)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            env = {"GIT_PROJECT_ROOT": str(root), "GIT_HTTP_EXPORT_ALL": "1", "PATH_INFO": path,
                   "QUERY_STRING": query, "REQUEST_METHOD": self.command, "REMOTE_USER": "x-access-token",
                   "CONTENT_TYPE": self.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
                   "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""), "PATH": "/usr/bin:/bin"}
            out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, timeout=60).stdout
            head, _, payload = out.partition(b"\r\n\r\n")
            status = 200
            headers = []
            for line in head.decode().split("\r\n"):
                name, _, value = line.partition(": ")
                if name.lower() == "status":
                    status = int(value.split()[0])
                elif name:
                    headers.append((name, value))
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _serve

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()

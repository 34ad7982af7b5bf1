"""Real services for integration tests, started on loopback with health checks and stopped afterwards."""

from __future__ import annotations

import os
import shutil
import socket
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(check, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception as exc:  # noqa: BLE001  (not up yet)
            last = exc
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not become healthy within {seconds}s ({last})")


@contextmanager
def redis_server(workdir: Path, port: int | None = None) -> Iterator[str]:
    """A private redis-server (nothing on disk) on a free (or the given) port; yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed; install Redis (Debian: apt-get install redis-server)")
    import redis

    port = port or free_port()
    process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                "--dir", str(workdir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        wait_until(lambda: redis.Redis.from_url(url).ping(), 15, "redis-server")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


@contextmanager
def chroma_server(workdir: Path, port: int | None = None) -> Iterator[tuple[str, int]]:
    """`chroma run` on a free (or the given) port, data under workdir/data; yields (host, port)."""
    import sys
    import urllib.request

    binary = Path(sys.executable).with_name("chroma")
    port = port or free_port()
    log = open(workdir / "chroma.log", "ab")
    process = subprocess.Popen([str(binary), "run", "--path", str(workdir / "data"), "--host", "127.0.0.1",
                                "--port", str(port)], stdout=log, stderr=subprocess.STDOUT,
                               env={**__import__("os").environ, "RUST_LOG": "warn"})
    url = f"http://127.0.0.1:{port}/api/v2/heartbeat"
    try:
        wait_until(lambda: urllib.request.urlopen(url, timeout=2).status == 200, 60, "chroma run")
        yield "127.0.0.1", port
    finally:
        stop_process(process)
        log.close()


def stop_process(process: subprocess.Popen, seconds: float = 15) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `seconds`."""
    process.terminate()
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.kill()


def stop_process_group(process: subprocess.Popen, sig: int = signal.SIGTERM, seconds: float = 60) -> None:
    """`sig` to the process's whole group (a worker and its pool, say), then SIGKILL if it has not exited."""
    os.killpg(process.pid, sig)
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


@contextmanager
def moto_server(workdir: Path, port: int | None = None) -> Iterator[str]:
    """moto's standalone server (real S3 and SQS HTTP APIs) on a free loopback port; yields its endpoint URL."""
    import sys
    import urllib.request

    port = port or free_port()
    log = open(workdir / "moto.log", "ab")
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                               stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: urllib.request.urlopen(f"{url}/moto-api/data.json", timeout=2).status == 200, 60, "moto server")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


@contextmanager
def aws_test_credentials(secret: str = "testing") -> Iterator[None]:
    """AWS_* for a moto server in this process's environment (and so in every subprocess it starts); restored after."""
    names = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": secret, "AWS_DEFAULT_REGION": "us-east-1"})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

"""`headwater serve` as a real process on a free port, and an HTTP client that speaks to it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.services import free_port, wait_until

TOKEN = "test-admin-token-0123456789abcdef"


class ServeProcess:
    """One serve process; `api` sends the admin token, `anonymous` sends none."""

    def __init__(self, workdir: Path, env: dict[str, str], name: str = "serve") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"{name}.log"
        self.env = {**os.environ, "HEADWATER_ADMIN_TOKEN": TOKEN, "HEADWATER_STATS_INTERVAL_SECONDS": "1",
                    "HEADWATER_SESSION_COOKIE_SECURE": "false", "COLUMNS": "200", **env}
        self.workdir = workdir
        self.process: subprocess.Popen | None = None
        self.api = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
        self.anonymous = httpx.Client(base_url=self.url, timeout=60)

    def start(self, seconds: float = 120) -> ServeProcess:
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen([sys.executable, "-m", "headwater.cli", "serve", "--port", str(self.port)],
                                        env=self.env, cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)

        def up() -> bool:
            return self.process.poll() is not None or httpx.get(self.url + "/readyz", timeout=2).status_code == 200

        wait_until(up, seconds, "headwater serve")
        if self.process.poll() is not None:
            raise RuntimeError(f"serve exited with {self.process.returncode}: {self.log()[-3000:]}")
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        self.api.close()
        self.anonymous.close()
        self._end_process()

    def restart(self) -> None:
        """Stop serve and start it again on the same port and environment, as a redeploy does."""
        self._end_process()
        self.start()

    def _end_process(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)

    def wait_for_run(self, run_id: str, seconds: float = 180) -> dict:
        """The finished run (polled over HTTP)."""
        found: dict = {}

        def finished() -> bool:
            found.update(self.api.get(f"/api/v1/runs/{run_id}").raise_for_status().json())
            return found["finished"]

        wait_until(finished, seconds, f"run {run_id}")
        return found

    def __enter__(self) -> ServeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

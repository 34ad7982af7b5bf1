"""Real fleet processes for tests: workers and beat over a Redis and a `chroma run`, driven in-process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import redis

from headwater.fleet import keys
from headwater.settings import Settings
from tests.services import stop_process_group

# Fast liveness for tests: a lost step is re-driven within seconds, not minutes.
TEST_TIMING = {"HEADWATER_LEASE_SECONDS": "4", "HEADWATER_SWEEP_INTERVAL_SECONDS": "1",
               "HEADWATER_REDRIVE_AFTER_SECONDS": "4", "HEADWATER_FLUSH_DELAY_SECONDS": "0.5",
               "HEADWATER_RUN_WINDOW": "4", "HEADWATER_TEST_CRASH_POINTS": "1",
               # Consolidation passes would add pointers to chunk metadata the tests compare; its own tests turn it on.
               "HEADWATER_CONSOLIDATE_ON_WRITE": "false"}
# Root reads any file; without the DAC capabilities a worker obeys permissions like a normal user.
_DROP = "-dac_override,-dac_read_search"
_AS_USER = ["setpriv", f"--bounding-set={_DROP}", f"--inh-caps={_DROP}", "--"] if os.geteuid() == 0 else []


class FleetProcesses:
    """Workers and a beat with one environment; each test names the collection it writes."""

    def __init__(self, redis_url: str, host: str, port: int, logs: Path, timing: dict[str, str] | None = None) -> None:
        self.redis_url, self.host, self.port, self.logs = redis_url, host, port, logs
        self.env = {**os.environ, "HEADWATER_REDIS_URL": redis_url, "HEADWATER_CHROMA_HOST": host,
                    "HEADWATER_CHROMA_PORT": str(port), "COLUMNS": "200", **(TEST_TIMING if timing is None else timing)}
        self.redis = redis.Redis.from_url(redis_url)
        self.processes: dict[str, subprocess.Popen] = {}

    def _start(self, name: str, *args: str) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "ab")
        process = subprocess.Popen([*_AS_USER, sys.executable, "-m", "headwater.cli", *args], env=self.env,
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.logs)
        self.processes[name] = process
        return process

    def start_worker(self, name: str = "worker", concurrency: int = 1, queues: str | None = None,
                     pool: str | None = None, fleet_name: str | None = None) -> subprocess.Popen:
        """A worker serving `queues` (default: all) with `concurrency` processes, or threads with pool="threads".

        `name` is the harness's handle (and log file); `fleet_name` the worker's `--name` in the fleet
        (default: headwater-PID@HOST, a new one at every start)."""
        return self._start(name, "worker", "-c", str(concurrency), *(["--queues", queues] if queues else []),
                           *(["--pool", pool] if pool else []), *(["--name", fleet_name] if fleet_name else []))

    def start_beat(self) -> subprocess.Popen:
        return self._start("beat", "beat", "--schedule-file", str(self.logs / "beat-schedule"))

    def start_fleet(self) -> None:
        """One worker (all queues) and the beat."""
        self.start_worker()
        self.start_beat()

    def queue_sync(self, collection: str, folder: Path, source_id: str, **options):  # noqa: ANN201
        """Queue a full run of a folder; returns (the enqueuing Fleet, the run id)."""
        from connectors.folder import FolderConnector
        from headwater.fleet.context import local_target
        from headwater.fleet.enqueue import enqueue_sync

        fleet = self.client(collection)
        spec = FolderConnector(source_id, folder).spec()
        return fleet, enqueue_sync(fleet, spec, local_target(fleet.settings), **options)

    def documents(self, collection: str) -> set[str]:
        """The uris the collection holds."""
        return {metadata["uri"] for _, metadata in self.records(collection).values()}

    def kill(self, name: str) -> None:
        """SIGKILL a whole worker (main process and pool), as a preempted node or an OOM kill would."""
        process = self.processes.pop(name)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)

    def stop_one(self, name: str) -> None:
        """Stop one process on purpose (SIGTERM, as a deploy does), waiting for it to exit."""
        stop_process_group(self.processes.pop(name))

    def pause(self, name: str) -> None:
        """Freeze a process (SIGSTOP): it holds what it holds and does nothing until resumed."""
        os.killpg(self.processes[name].pid, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        os.killpg(self.processes[name].pid, signal.SIGCONT)

    def stop(self) -> None:
        for process in self.processes.values():  # a paused process cannot act on SIGTERM
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGCONT)
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        self.processes.clear()

    def settings(self, collection: str, **overrides) -> Settings:
        return Settings(redis_url=self.redis_url, chroma_host=self.host, chroma_port=self.port, collection=collection,
                        run_window=4, **overrides)

    def client(self, collection: str):
        """An enqueuing Fleet (as the CLI or the HTTP app has) for one collection."""
        from workers.sending import fleet_client

        return fleet_client(self.settings(collection))

    def cli(self, *args: str, collection: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "headwater.cli", *args], env={
            **self.env, "HEADWATER_COLLECTION": collection}, capture_output=True, text=True, timeout=300)

    def records(self, collection: str) -> dict:
        from headwater.pipeline.stores import open_store

        try:
            store = open_store(self.settings(collection), create=False)
        except Exception:  # noqa: BLE001  (no collection yet: nothing written)
            return {}
        got = store.collection.get(include=["documents", "metadatas"])
        return {i: (d, m) for i, d, m in zip(got["ids"], got["documents"], got["metadatas"])}

    def manifest(self, collection: str, source_id: str) -> dict:
        """uri -> (version, hash, chunk ids, complete) of the collection's manifest entries."""
        from headwater.pipeline.stores import open_store

        store = open_store(self.settings(collection), create=False)
        return {e.uri: (e.doc_version, e.doc_hash, e.ids, e.complete) for e in store.manifest.entries(source_id)}

    def embedded_texts(self) -> dict[str, int]:
        return {side: int(self.redis.get(f"{keys.EMBEDDED_TEXTS}:{side}") or 0) for side in ("dense", "sparse")}

    def wait_for_run(self, fleet, run_id: str, seconds: float = 180):  # noqa: ANN001
        """The finished run; fails at once if a worker died, and with the run's whole state on timeout."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            run = fleet.runs.get(run_id)
            if run is not None and run.status.finished:
                return run
            dead = [name for name, p in self.processes.items() if p.poll() is not None]
            assert not dead, f"fleet processes exited: {dead}; see {self.logs}"
            time.sleep(0.2)
        raise AssertionError(f"run {run_id} did not finish within {seconds}s: {json.dumps(self.describe(fleet, run_id))}")

    def describe(self, fleet, run_id: str) -> dict:  # noqa: ANN001
        run = fleet.runs.get(run_id)
        leases = {m.decode(): s - time.time() for m, s in self.redis.zrange(keys.LEASES, 0, -1, withscores=True)
                  if m.decode().startswith(run_id)}
        return {"run": run.to_json() if run else None, "states": fleet.runs.states(run_id),
                "leases (seconds left)": leases, "logs": str(self.logs)}

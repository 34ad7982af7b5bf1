"""The worker fleet with real Redis, a real `chroma run` server and real worker processes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import redis

from headwater.settings import Settings
from tests.services import chroma_server, redis_server, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[2] / "examples" / "docs"


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    with redis_server(root) as redis_url, chroma_server(root) as (host, port):
        yield {"redis_url": redis_url, "host": host, "port": port, "root": root}


class FleetHarness:
    def __init__(self, services, collection: str) -> None:
        self.env = {**os.environ, "HEADWATER_REDIS_URL": services["redis_url"], "HEADWATER_CHROMA_HOST": services["host"],
                    "HEADWATER_CHROMA_PORT": str(services["port"]), "HEADWATER_COLLECTION": collection,
                    "HEADWATER_FLUSH_DELAY_SECONDS": "0.5", "HEADWATER_FLUSH_LEASE_SECONDS": "10",
                    "HEADWATER_RUN_WINDOW": "4", "COLUMNS": "200", "HEADWATER_VISIBILITY_TIMEOUT_SECONDS": "20"}
        self.settings = Settings(redis_url=services["redis_url"], chroma_host=services["host"],
                                 chroma_port=services["port"], collection=collection)
        self.redis = redis.Redis.from_url(services["redis_url"])
        self.workers: list[subprocess.Popen] = []
        self.logs = services["root"]

    def start_worker(self, name: str) -> subprocess.Popen:
        log = open(self.logs / f"worker-{name}.log", "ab")
        process = subprocess.Popen([sys.executable, "-m", "headwater.cli", "worker", "-c", "1"], env=self.env,
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.workers.append(process)
        return process

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "headwater.cli", *args], env=self.env, capture_output=True,
                              text=True, timeout=600)

    def stop(self) -> None:
        for process in self.workers:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.workers:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)

    def records(self):
        from headwater.chroma_store import ChromaStore

        got = ChromaStore.from_settings(self.settings, create=False).collection.get(include=["documents", "metadatas"])
        return {i: (d, m) for i, d, m in zip(got["ids"], got["documents"], got["metadatas"])}

    def embedded_texts(self) -> dict[str, int]:
        return {side: int(self.redis.get(f"headwater:stats:embedded-texts:{side}") or 0) for side in ("dense", "sparse")}


@pytest.fixture
def fleet(services, request):
    harness = FleetHarness(services, f"fleet-{request.node.name[-40:].replace('_', '-')}".strip("-"))
    yield harness
    harness.stop()


def _embedded_records(folder, tmp_path, source_id):
    from headwater.embedded import open_engine
    from connectors.folder import FolderConnector

    with open_engine(Settings(chroma_path=tmp_path / "embedded", collection="embedded")) as engine:
        engine.sync(FolderConnector(source_id, folder))
        got = engine.store.collection.get(include=["documents", "metadatas"])
    return {i: (d, m) for i, d, m in zip(got["ids"], got["documents"], got["metadatas"])}


def test_fleet_sync_equals_embedded_sync(fleet, tmp_path):
    folder = tmp_path / "docs"
    shutil.copytree(EXAMPLES, folder)
    fleet.start_worker("a")
    fleet.start_worker("b")
    result = fleet.cli("sync", str(folder), "--fleet", "--wait", "--source-id", "docs")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "complete" in result.stdout
    _assert_same_records(fleet.records(), _embedded_records(folder, tmp_path, "docs"))


def _assert_same_records(got: dict, want: dict) -> None:
    """Same ids, same texts, same metadata (SPLADE vectors included), record for record."""
    assert got.keys() == want.keys()
    for record_id, (text, metadata) in want.items():
        assert got[record_id] == (text, metadata), record_id


def test_the_same_change_five_times_is_embedded_once(fleet, tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    nonce = os.urandom(6).hex()  # text no earlier test embedded, so caches cannot hide repeated work
    for n in range(3):
        (folder / f"note-{n}.md").write_text(f"# Note {n} {nonce}\n\nRelease checklist item {n} for build {nonce}.\n")
    before = fleet.embedded_texts()
    queued = [fleet.cli("sync", str(folder), "--fleet", "--source-id", "dup") for _ in range(5)]
    assert all(r.returncode == 0 for r in queued)
    fleet.start_worker("a")
    from headwater.fleet import redis_client
    from headwater.runs import RunStore

    runs = RunStore(redis_client(fleet.settings))
    wait_until(lambda: all(r.status.finished for r in runs.list(5)), 300, "five runs")
    texts = {d for d, _ in fleet.records().values()}
    after = fleet.embedded_texts()
    assert after["dense"] - before["dense"] == len(texts) == after["sparse"] - before["sparse"]
    assert all(r.status.value == "complete" for r in runs.list(5))


def _corpus(tmp_path, copies: int):
    folder = tmp_path / "corpus"
    for n in range(copies):
        shutil.copytree(EXAMPLES, folder / f"copy-{n}")
    return folder


def _run_when_midway(fleet, run_id: str):
    from headwater.fleet import redis_client
    from headwater.runs import RunStore

    runs = RunStore(redis_client(fleet.settings))
    wait_until(lambda: runs.get(run_id).counters["indexed"] >= 2, 300, "the run to get going")
    assert not runs.get(run_id).status.finished, "the run finished before the kill: make the corpus larger"
    return runs


def _queue(fleet, folder, source_id: str) -> str:
    result = fleet.cli("sync", str(folder), "--fleet", "--source-id", source_id)
    assert result.returncode == 0, result.stderr
    return result.stdout.split("queued run ")[1].split()[0]


def _assert_complete_once(fleet, runs, run_id, folder, tmp_path, source_id):
    wait_until(lambda: runs.get(run_id).status.finished, 600, "the run to finish")
    run = runs.get(run_id)
    documents = [p for p in folder.rglob("*") if p.is_file()]
    assert run.status.value == "complete", run.to_json()
    assert run.counters["indexed"] == len(documents)  # each document written once
    _assert_collection_complete(fleet, documents)


def _assert_collection_complete(fleet, documents):
    records = fleet.records()
    by_uri: dict[str, list] = {}
    for _, metadata in records.values():
        by_uri.setdefault(metadata["uri"], []).append(metadata)
    assert len(by_uri) == len(documents)  # nothing missing
    for chunks in by_uri.values():  # no partial or doubled documents
        assert sorted(m["chunk_index"] for m in chunks) == list(range(chunks[0]["chunk_count"]))


def test_a_killed_pool_child_loses_nothing(fleet, tmp_path):
    import psutil

    folder = _corpus(tmp_path, 3)
    worker = fleet.start_worker("a")
    run_id = _queue(fleet, folder, "kill-child")
    runs = _run_when_midway(fleet, run_id)
    children = psutil.Process(worker.pid).children(recursive=True)
    assert children
    for child in children:
        child.send_signal(signal.SIGKILL)
    _assert_complete_once(fleet, runs, run_id, folder, tmp_path, "kill-child")


def test_a_killed_worker_loses_nothing_after_restart(fleet, tmp_path):
    folder = _corpus(tmp_path, 3)
    worker = fleet.start_worker("a")
    run_id = _queue(fleet, folder, "kill-worker")
    runs = _run_when_midway(fleet, run_id)
    os.killpg(worker.pid, signal.SIGKILL)  # the whole worker, main process and pool, mid-batch
    worker.wait(timeout=30)
    fleet.start_worker("b")
    _assert_complete_once(fleet, runs, run_id, folder, tmp_path, "kill-worker")


def test_a_small_source_is_served_while_a_large_one_backfills(fleet, tmp_path):
    large = _corpus(tmp_path, 5)
    small = tmp_path / "small"
    small.mkdir()
    (small / "hotfix.md").write_text("# Hotfix\n\nRoll back the deployment before investigating.\n")
    fleet.start_worker("a")
    large_run = _queue(fleet, large, "large")
    runs = _run_when_midway(fleet, large_run)
    queued_at = time.monotonic()
    small_run = _queue(fleet, small, "small")
    wait_until(lambda: runs.get(small_run).status.finished, 240, "the small run")
    waited = time.monotonic() - queued_at
    assert runs.get(small_run).status.value == "complete"
    assert not runs.get(large_run).status.finished, "the backfill ended first: the small run may have waited for it"
    assert waited < 90, f"the small source waited {waited:.0f}s"
    wait_until(lambda: runs.get(large_run).status.finished, 600, "the large run")


@pytest.fixture
def own_services(tmp_path):
    """Services this test may stop and restart (same ports, same data)."""
    from tests.services import free_port

    return {"root": tmp_path, "redis_port": free_port(), "chroma_port": free_port()}


def test_a_chroma_outage_of_30_seconds_mid_run(own_services, tmp_path):
    root = own_services["root"]
    with redis_server(root, own_services["redis_port"]) as redis_url:
        services = {"redis_url": redis_url, "host": "127.0.0.1", "port": own_services["chroma_port"], "root": root}
        fleet = FleetHarness(services, "outage")
        folder = _corpus(tmp_path, 3)
        try:
            with chroma_server(root, own_services["chroma_port"]):
                fleet.start_worker("a")
                run_id = _queue(fleet, folder, "outage")
                runs = _run_when_midway(fleet, run_id)
            time.sleep(30)  # Chroma is down: reads and writes fail and are retried
            assert not runs.get(run_id).status.finished
            with chroma_server(root, own_services["chroma_port"]):
                _assert_complete_once(fleet, runs, run_id, folder, tmp_path, "outage")
        finally:
            fleet.stop()


def test_redis_restarted_empty_costs_time_not_data(own_services, tmp_path):
    root = own_services["root"]
    folder = _corpus(tmp_path, 2)
    with chroma_server(root, own_services["chroma_port"]) as (host, port):
        with redis_server(root, own_services["redis_port"]) as redis_url:
            fleet = FleetHarness({"redis_url": redis_url, "host": host, "port": port, "root": root}, "redis-loss")
            try:
                fleet.start_worker("a")
                run_id = _queue(fleet, folder, "redis-loss")
                _run_when_midway(fleet, run_id)
            except BaseException:
                fleet.stop()
                raise
        # Redis is gone with every queue, run record and payload; it comes back empty.
        try:
            with redis_server(root, own_services["redis_port"]):
                from headwater.fleet import redis_client
                from headwater.runs import RunStore

                runs = RunStore(redis_client(fleet.settings))
                assert runs.get(run_id) is None
                again = _queue(fleet, folder, "redis-loss")  # the next reconciliation
                wait_until(lambda: runs.get(again).status.finished, 600, "the reconciliation run")
                assert runs.get(again).status.value == "complete", runs.get(again).to_json()
                _assert_collection_complete(fleet, [p for p in folder.rglob("*") if p.is_file()])
        finally:
            fleet.stop()

"""Consolidation in the fleet: real Redis, a real `chroma run`, a worker and beat as processes.

The fleet's writes schedule a pass on the consolidation queue; edits and deletes of sources in a
later run update or remove the knowledge they backed.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager

import pytest

from headwater.consolidation import knowledge as kn
from tests.consolidation_corpus import EXACT, NEAR, write_corpus
from tests.integration.fleet_harness import TEST_TIMING, FleetProcesses
from tests.services import chroma_server, redis_server
from headwater import queues as names
from headwater.consolidation.stage import last_report_key

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
COLLECTION = "consolidated"


@contextmanager
def _fleet(tmp_path, on_write: bool):
    with redis_server(tmp_path) as redis_url, chroma_server(tmp_path) as (host, port):
        processes = FleetProcesses(redis_url, host, port, tmp_path, timing={
            **TEST_TIMING, "HEADWATER_CONSOLIDATE_ON_WRITE": "true" if on_write else "false",
            "HEADWATER_CONSOLIDATE_DEBOUNCE_SECONDS": "1",
            # The beat's own consolidation sweep stays an hour away: the tests send it when they mean to.
            "HEADWATER_CONSOLIDATE_SWEEP_INTERVAL_SECONDS": "3600",
            # An endpoint nobody listens on: the three ambiguous pairs stay undecided; copies need no LLM.
            "HEADWATER_CONSOLIDATE_LLM_URL": "http://127.0.0.1:9/v1", "HEADWATER_CONSOLIDATE_LLM_RETRIES": "0"})
        processes.start_fleet()
        try:
            yield processes
        finally:
            processes.stop()


@pytest.fixture
def fleet(tmp_path):
    with _fleet(tmp_path, on_write=True) as processes:
        yield processes


@pytest.fixture
def fleet_without_triggers(tmp_path):
    """Writes schedule no pass: every trigger is lost, as when the consolidation queue's messages are."""
    with _fleet(tmp_path, on_write=False) as processes:
        yield processes


def _knowledge(fleet: FleetProcesses) -> dict[tuple[str, ...], dict]:
    import chromadb

    client = chromadb.HttpClient(host=fleet.host, port=fleet.port)
    try:
        collection = client.get_collection(COLLECTION + "__knowledge")
    except Exception:  # noqa: BLE001  (not created yet)
        return {}
    got = collection.get(include=["metadatas"])
    return {tuple(sorted(m[kn.URIS])): m for m in got["metadatas"]}


def _wait_for(check, fleet: FleetProcesses, what: str, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        dead = [name for name, p in fleet.processes.items() if p.poll() is not None]
        assert not dead, f"fleet processes exited: {dead}; see {fleet.logs}"
        time.sleep(0.5)
    raise AssertionError(f"{what} within {seconds}s; last report: {fleet.redis.get(last_report_key(COLLECTION))}")


def _last_report_read(fleet: FleetProcesses, chunks: int) -> bool:
    """Whether the collection's last pass read `chunks` chunks."""
    raw = fleet.redis.get(last_report_key(COLLECTION))
    return raw is not None and json.loads(raw)["chunks"] == chunks


def test_fleet_writes_feed_consolidation_and_knowledge_follows_the_data(fleet, tmp_path):
    docs = write_corpus(tmp_path / "docs")
    client, run_id = fleet.queue_sync(COLLECTION, docs, "docs")
    fleet.wait_for_run(client, run_id)
    written = len(fleet.records(COLLECTION))
    # A pass may start while the run is still writing (it reads what has landed, and the writes after
    # it schedule the next one): the report to check is of the pass that read every chunk written.
    _wait_for(lambda: _last_report_read(fleet, written)
              and set(_knowledge(fleet)) == {tuple(sorted(EXACT)), tuple(sorted(NEAR))}, fleet,
              "the fleet's writes were not consolidated")
    report = json.loads(fleet.redis.get(last_report_key(COLLECTION)))
    assert report["llm_pairs"] == 3 and report["llm_calls"] == 0
    pointed = {m["uri"]: m.get(kn.KNOWLEDGE_IDS) for _, m in fleet.records(COLLECTION).values()}
    assert pointed["handbook/vpn.md"] and pointed["misc/bread.md"] is None

    (docs / "docs/it/vpn-setup.md").write_text("# VPN\n\nThe VPN moved to a new provider; see the portal.\n")
    (docs / "wiki/ops/backups.md").unlink()
    client, run_id = fleet.queue_sync(COLLECTION, docs, "docs")
    fleet.wait_for_run(client, run_id)
    _wait_for(lambda: not _knowledge(fleet), fleet, "knowledge of edited and deleted sources was not removed")
    _wait_for(lambda: all(not m.get(kn.KNOWLEDGE_IDS) for _, m in fleet.records(COLLECTION).values()), fleet,
              "source chunks still point at removed knowledge")


def _sweep(fleet: FleetProcesses, client) -> dict:  # noqa: ANN001
    """Send the beat's consolidation sweep and wait for the pass it schedules; returns that pass's report."""
    fleet.redis.delete(last_report_key(COLLECTION))
    client.send(names.CONSOLIDATE_SWEEP, [])
    _wait_for(lambda: fleet.redis.get(last_report_key(COLLECTION)) is not None, fleet,
              "the sweep scheduled no pass of the collection")
    return json.loads(fleet.redis.get(last_report_key(COLLECTION)))


def test_the_beat_sweep_consolidates_what_lost_triggers_missed(fleet_without_triggers, tmp_path):
    fleet = fleet_without_triggers
    docs = write_corpus(tmp_path / "docs")
    client, run_id = fleet.queue_sync(COLLECTION, docs, "docs")
    fleet.wait_for_run(client, run_id)
    assert not _knowledge(fleet) and fleet.redis.get(last_report_key(COLLECTION)) is None  # no pass was scheduled

    # The sweep task (what the beat sends) finds the data collection and schedules its pass.
    report = _sweep(fleet, client)
    assert report["written"] == 2 and report["llm_pairs"] == 3 and report["removed"] == 0
    assert set(_knowledge(fleet)) == {tuple(sorted(EXACT)), tuple(sorted(NEAR))}

    # Edit and delete sources: the run's writes schedule nothing, so the knowledge behind them is orphaned.
    (docs / "docs/it/vpn-setup.md").write_text("# VPN\n\nThe VPN moved to a new provider; see the portal.\n")
    (docs / "wiki/ops/backups.md").unlink()
    client, run_id = fleet.queue_sync(COLLECTION, docs, "docs")
    fleet.wait_for_run(client, run_id)
    present = set(fleet.records(COLLECTION))
    orphaned = _knowledge(fleet)
    assert len(orphaned) == 2 and all(not set(m[kn.CHUNK_IDS]) <= present for m in orphaned.values())

    # The next sweep's pass removes every orphan and the pointers at them.
    report = _sweep(fleet, client)
    assert report["removed"] == 2 and report["written"] == 0
    assert not _knowledge(fleet)
    assert all(not m.get(kn.KNOWLEDGE_IDS) for _, m in fleet.records(COLLECTION).values())

"""The worker fleet with real Redis, a real `chroma run` server and real worker processes.

Most tests share one worker and one beat (fast test timing: 4 s leases, a sweep every second) and
write to a collection of their own. Tests that stop a service or need production timing start
their own.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from connectors.folder import FolderConnector
from headwater.pipeline.stores import open_store
from headwater.fleet import crash, keys
from headwater.fleet.context import local_target
from headwater.fleet.enqueue import enqueue_changes, enqueue_sync, retry_run
from headwater.fleet.state import DENSE, SPARSE
from headwater.models import DocumentChange, Op
from headwater.settings import Settings
from headwater.sync.sync_engine import SyncEngine
from tests.documents import write_binary_formats
from tests.integration.fleet_harness import FleetProcesses
from tests.services import chroma_server, free_port, redis_server, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "docs"
WORDS = ("Rotate the deployment token every ninety days, record who rotated it, and verify that the "
         "old token is refused before closing the change ticket. ")


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    with redis_server(root) as redis_url, chroma_server(root) as (host, port):
        yield {"redis_url": redis_url, "host": host, "port": port, "root": root}


@pytest.fixture(scope="module")
def processes(services):
    fleet = FleetProcesses(services["redis_url"], services["host"], services["port"], services["root"])
    fleet.start_worker()
    fleet.start_beat()
    yield fleet
    fleet.stop()


@pytest.fixture
def collection(request) -> str:
    return "c-" + request.node.name[-50:].replace("_", "-").replace("[", "-").replace("]", "").replace(".", "-")


class Reference:
    """An embedded sync of the same folder: what the fleet's collection must equal."""

    def __init__(self, path: Path, dense, sparse) -> None:  # noqa: ANN001
        from headwater.pipeline.model_identity import dense_identity, sparse_identity

        settings = Settings(chroma_path=path, collection="reference")
        self.store = open_store(settings, dense_model=dense_identity(), sparse_model=sparse_identity())
        self.engine = SyncEngine(self.store, dense, sparse, settings)

    def sync(self, folder: Path, source_id: str):
        return self.engine.sync(FolderConnector(source_id, folder))

    def records(self) -> dict:
        got = self.store.collection.get(include=["documents", "metadatas"])
        return {i: (d, m) for i, d, m in zip(got["ids"], got["documents"], got["metadatas"])}

    def manifest(self, source_id: str) -> dict:
        return {e.uri: (e.doc_version, e.doc_hash, e.ids, e.complete) for e in self.store.manifest.entries(source_id)}


@pytest.fixture
def reference(tmp_path, dense, sparse) -> Reference:
    return Reference(tmp_path / "reference", dense, sparse)


def assert_same_records(got: dict, want: dict) -> None:
    """Same ids, same texts, same metadata (SPLADE vectors included), record for record."""
    missing = sorted({m["uri"] for i, (_, m) in want.items() if i not in got})
    extra = sorted({m["uri"] for i, (_, m) in got.items() if i not in want})
    assert not missing and not extra, f"records missing for {missing}, unexpected for {extra}"
    for record_id, (text, metadata) in want.items():
        assert got[record_id] == (text, metadata), record_id


def write_corpus(folder: Path, documents: int = 6) -> str:
    """Markdown documents whose every chunk is new text (a nonce), so vector caches cannot hide work."""
    nonce = os.urandom(6).hex()
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(documents):
        sections = "\n\n".join(f"## Step {j} of runbook {i}\n\nBuild {nonce}-{i}-{j}. {WORDS * 3}" for j in range(3))
        (folder / f"runbook-{i}.md").write_text(f"# Runbook {i} ({nonce})\n\n{sections}\n")
    return nonce


def spec(folder: Path, source_id: str) -> dict:
    return FolderConnector(source_id, folder).spec()


def run_sync(processes, collection: str, folder: Path, source_id: str, seconds: float = 180, **options):  # noqa: ANN001
    fleet, run_id = processes.queue_sync(collection, folder, source_id, **options)
    return fleet, processes.wait_for_run(fleet, run_id, seconds)


# Crash points: one test per named point ----------------------------------------------------------

@pytest.mark.parametrize("point", crash.POINTS)
def test_a_worker_killed_at_each_crash_point_loses_nothing(point, processes, collection, tmp_path, reference):
    folder = tmp_path / "docs"
    write_corpus(folder)
    if point == "finish.after_delete":  # the finish step deletes only what an earlier run indexed
        run_sync(processes, collection, folder, "docs")
        (folder / "runbook-5.md").unlink()
    before = processes.embedded_texts()
    fleet = processes.client(collection)
    fleet.crash.arm(point)
    _, run = run_sync(processes, collection, folder, "docs")
    assert fleet.crash.remaining(point) <= 0, f"{point} was never reached"
    assert run.status.value == "complete", processes.describe(fleet, run.id)
    reference.sync(folder, "docs")
    want = reference.records()
    assert_same_records(processes.records(collection), want)
    # The manifest is complete and true wherever the worker died (flush.after_chunks: between the
    # chunk writes and the manifest write), so the next run's listing can trust it.
    assert processes.manifest(collection, "docs") == reference.manifest("docs")
    # Nothing embedded twice, beyond the chunks of the one document whose worker was killed.
    per_document: dict[str, int] = {}
    for _, metadata in want.values():
        per_document[metadata["uri"]] = per_document.get(metadata["uri"], 0) + 1
    texts = len({text for text, _ in want.values()})
    embedded = processes.embedded_texts()
    for side in ("dense", "sparse"):
        assert embedded[side] - before[side] <= texts + max(per_document.values()), side
    assert not processes.redis.zrangebyscore(keys.LEASES, "-inf", "+inf")  # nothing left behind


def test_a_lease_that_expires_with_no_later_traffic_is_reclaimed_by_the_sweeper(processes, collection, tmp_path):
    folder = tmp_path / "one"
    write_corpus(folder, documents=1)
    fleet = processes.client(collection)
    fleet.crash.arm("flush.after_take")  # the only write batch of the only document dies in hand
    _, run = run_sync(processes, collection, folder, "one")
    assert fleet.crash.remaining("flush.after_take") <= 0
    assert run.status.value == "complete" and run.counters["indexed"] == 1


def test_a_poison_pill_fails_after_its_deliveries_and_the_others_complete(processes, collection, tmp_path):
    folder = tmp_path / "docs"
    write_corpus(folder, documents=3)
    fleet = processes.client(collection)
    fleet.crash.arm("parse.after_plan", times=50, uri="runbook-1.md")  # it kills every worker that parses it
    _, run = run_sync(processes, collection, folder, "docs")
    killed = 50 - fleet.crash.remaining("parse.after_plan")
    fleet.crash.arm("parse.after_plan", times=0)
    assert run.status.value == "complete_with_errors", run.to_json()
    assert "poison pill" in run.errors["runbook-1.md"] and run.counters["indexed"] == 2
    assert killed == Settings().max_deliveries  # one kill per delivery, then it is failed without a fourth


def test_a_programming_error_fails_its_document_at_once_and_the_others_complete(processes, collection, tmp_path):
    folder = tmp_path / "docs"
    write_corpus(folder, documents=3)
    fleet = processes.client(collection)
    fleet.crash.arm("parse.after_plan", times=50, uri="runbook-1.md", action=crash.BUG)  # a TypeError, every time
    _, run = run_sync(processes, collection, folder, "docs")
    raised = 50 - fleet.crash.remaining("parse.after_plan")
    fleet.crash.arm("parse.after_plan", times=0)
    assert run.status.value == "complete_with_errors", run.to_json()
    assert raised == 1, f"the parse was tried {raised} times; a programming error is not worth a retry"
    reason = run.errors["runbook-1.md"]
    assert "programming error at its parse step (InjectedBug" in reason and "headwater retry RUN" in reason, reason
    assert run.counters["indexed"] == 2


# Re-syncs, targets, guards --------------------------------------------------------------------

def test_fleet_resyncs_equal_embedded_ones_through_edits_deletes_renames_and_bad_files(
        processes, collection, tmp_path, reference):
    folder = tmp_path / "docs"
    shutil.copytree(EXAMPLES, folder)
    write_binary_formats(folder)

    def both_sync() -> None:
        _, run = run_sync(processes, collection, folder, "docs")
        assert run.status.value in ("complete", "complete_with_errors"), run.to_json()
        reference.sync(folder, "docs")
        assert_same_records(processes.records(collection), reference.records())
        assert processes.manifest(collection, "docs") == reference.manifest("docs")

    both_sync()
    first = sorted(p for p in folder.rglob("*") if p.suffix in (".md", ".txt", ".html", ".csv"))
    with open(first[0], "a") as handle:  # edit
        handle.write("\n\n## Added later\n\nA paragraph appended after the first sync.\n")
    first[1].unlink()  # delete
    first[2].rename(first[2].with_name("renamed-" + first[2].name))  # rename
    (folder / "empty.md").write_text("")  # empty: skipped
    (folder / "blob.txt").write_bytes(os.urandom(2048))  # binary behind a text extension: failed
    both_sync()


def test_collection_option_is_honoured(processes, collection, tmp_path):
    folder = tmp_path / "docs"
    write_corpus(folder, documents=2)
    other = collection[:40] + "-other"
    result = processes.cli("sync", str(folder), "--fleet", "--wait", "--source-id", "col", "--collection", other,
                           collection=collection)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(processes.documents(other)) == 2
    assert processes.records(collection) == {}


def test_an_unreadable_subdirectory_or_an_empty_root_deletes_nothing(processes, collection, tmp_path):
    folder = tmp_path / "docs"
    write_corpus(folder / "team", documents=2)
    write_corpus(folder, documents=2)
    _, run = run_sync(processes, collection, folder, "guard")
    before = processes.records(collection)
    assert run.status.value == "complete" and len(before) > 0

    (folder / "team").chmod(0)
    try:
        _, run = run_sync(processes, collection, folder, "guard")
    finally:
        (folder / "team").chmod(0o755)
    assert run.status.value == "failed" and "cannot list" in run.errors["(source)"]
    assert processes.records(collection) == before

    for path in folder.rglob("*.md"):
        path.unlink()
    _, run = run_sync(processes, collection, folder, "guard")
    assert run.status.value == "failed" and "--allow-mass-delete" in run.errors["(source)"]
    assert processes.records(collection) == before
    _, run = run_sync(processes, collection, folder, "guard", allow_mass_delete=True)
    assert run.status.value == "complete" and processes.records(collection) == {}


# Live changes ---------------------------------------------------------------------------------

def test_duplicated_and_reordered_live_changes_converge_on_the_newest(processes, collection, tmp_path, reference):
    folder = tmp_path / "live"
    write_corpus(folder, documents=3)
    _, run = run_sync(processes, collection, folder, "live")
    connector = FolderConnector("live", folder)
    fleet = processes.client(collection)
    target, source = local_target(fleet.settings), connector.spec()

    def change_of(name: str):
        return connector._change_for(folder / name, name)

    edited = folder / "runbook-0.md"
    versions = []
    for n in range(3):  # three versions of one document, each a change with a later mtime
        edited.write_text(edited.read_text() + f"\n\n## Revision {n}\n\nRevision {n} {os.urandom(4).hex()}.\n")
        os.utime(edited, ns=(time.time_ns(), time.time_ns() + n * 1_000_000))
        versions.append(change_of("runbook-0.md"))
    old_upsert = change_of("runbook-1.md")
    (folder / "runbook-1.md").unlink()
    deleted = DocumentChange("live", "runbook-1.md", Op.DELETE, sequence=f"{time.time_ns():020d}")
    overtaken = DocumentChange("live", "runbook-2.md", Op.DELETE, sequence=f"{time.time_ns():020d}")
    os.utime(folder / "runbook-2.md", ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    later_upsert = change_of("runbook-2.md")  # the document is back, after the delete was sent

    before = processes.embedded_texts()
    deliveries = [*versions, old_upsert, deleted, overtaken, later_upsert] * 5
    random.Random(7).shuffle(deliveries)
    deliveries.remove(overtaken)
    deliveries.insert(0, overtaken)  # the delete is accepted before the upsert that overtakes it
    run_ids = [r for r in (enqueue_changes(fleet, source, target, [c]) for c in deliveries) if r]
    assert len(run_ids) <= 1 + 3 + 2 + 1  # duplicates and stale changes never make a run
    for run_id in run_ids:
        assert processes.wait_for_run(fleet, run_id).status.value == "complete"
    reference.sync(folder, "live")
    assert_same_records(processes.records(collection), reference.records())
    newest = {text for text, m in reference.records().values() if m["uri"] == "runbook-0.md"}
    embedded = processes.embedded_texts()
    assert embedded["dense"] - before["dense"] <= len(newest)  # each new text embedded once


def test_watch_fleet_forwards_file_events_as_live_changes(processes, collection, tmp_path):
    folder = tmp_path / "watched"
    write_corpus(folder, documents=2)
    watcher = subprocess.Popen([sys.executable, "-m", "headwater.cli", "watch", str(folder), "--fleet", "--source-id",
                                "watched"], env={**processes.env, "HEADWATER_COLLECTION": collection,
                                                 "HEADWATER_WATCH_DEBOUNCE_SECONDS": "0.2"},
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: processes.documents(collection) == {"runbook-0.md", "runbook-1.md"}, 120, "the first run")
        (folder / "added.md").write_text("# Added\n\nA note written while the folder was watched.\n")
        (folder / "runbook-0.md").unlink()
        wait_until(lambda: processes.documents(collection) == {"runbook-1.md", "added.md"}, 120, "the live changes")
        kinds = {run.kind for run in processes.client(collection).runs.list(20, "watched")}
        assert kinds == {"full", "live"}
    finally:
        watcher.send_signal(signal.SIGINT)
        output, _ = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, output[-2000:]


def test_cancel_end_to_end(processes, collection, tmp_path):
    folder = tmp_path / "many"
    write_corpus(folder, documents=40)  # far more than can finish while the cancel is on its way
    fleet, run_id = processes.queue_sync(collection, folder, "many")
    wait_until(lambda: fleet.runs.get(run_id).counters["indexed"] >= 1, 120, "the first document to be indexed")
    result = processes.cli("cancel", run_id[:10], collection=collection)
    assert result.returncode == 0 and "cancelled" in result.stdout, result.stderr
    assert processes.wait_for_run(fleet, run_id, 10).status.value == "cancelled"
    # No step of a cancelled run commits again, and the sweeper drops its leases.
    wait_until(lambda: not [m for m in processes.redis.zrange(keys.LEASES, 0, -1) if m.decode().startswith(run_id)],
               30, "the cancelled run's leases to be dropped")
    indexed = fleet.runs.get(run_id).counters["indexed"]
    assert indexed < 40 and len(processes.documents(collection)) <= indexed + fleet.settings.run_window
    again = processes.cli("cancel", run_id, collection=collection)
    assert again.returncode == 1 and "already finished" in again.stderr


def test_the_same_sync_queued_five_times_embeds_each_text_once(processes, collection, tmp_path):
    folder = tmp_path / "dup"
    write_corpus(folder, documents=3)
    fleet = processes.client(collection)
    before = processes.embedded_texts()
    run_ids = [enqueue_sync(fleet, spec(folder, "dup"), local_target(fleet.settings)) for _ in range(5)]
    for run_id in run_ids:
        assert processes.wait_for_run(fleet, run_id).status.value == "complete"
    texts = {d for d, _ in processes.records(collection).values()}
    after = processes.embedded_texts()
    assert after["dense"] - before["dense"] == len(texts) == after["sparse"] - before["sparse"]


def test_a_small_source_is_served_while_a_large_one_backfills(processes, collection, tmp_path):
    large, small = tmp_path / "large", tmp_path / "small"
    write_corpus(large, documents=40)
    write_corpus(small, documents=1)
    fleet = processes.client(collection)
    target = local_target(fleet.settings)
    large_run = enqueue_sync(fleet, spec(large, "large"), target)
    wait_until(lambda: fleet.runs.get(large_run).counters["indexed"] >= 2, 120, "the backfill to get going")
    small_run = enqueue_sync(fleet, spec(small, "small"), target)
    assert processes.wait_for_run(fleet, small_run).status.value == "complete"
    assert not fleet.runs.get(large_run).status.finished, "the backfill ended first: the small run may have waited"
    assert processes.wait_for_run(fleet, large_run, 400).status.value == "complete"


def test_a_full_run_admits_its_largest_documents_first(services, collection, tmp_path):
    """The listing step, run in-process with no worker: the fetches it sends come largest first."""
    from headwater.fleet import steps
    from headwater.fleet.context import Fleet
    from headwater import queues as names

    folder = tmp_path / "docs"
    folder.mkdir()
    sizes = {"a-small.md": 1, "b-large.md": 40, "c-medium.md": 12, "d-tiny.md": 0, "e-larger.md": 60}
    for name, paragraphs in sizes.items():
        (folder / name).write_text(f"# {name}\n\n" + WORDS * paragraphs)
    sent: list[tuple[str, list]] = []
    settings = Settings(redis_url=services["redis_url"], chroma_host=services["host"], chroma_port=services["port"],
                        collection=collection, run_window=32)
    fleet = Fleet(settings, lambda task, args, countdown=None: sent.append((task, args)))
    run_id = enqueue_sync(fleet, spec(folder, "largest-first"), local_target(settings))
    assert sent == [(names.LIST_SOURCE, [run_id])]
    steps.list_source(fleet, run_id)
    fetched = [args[1] for task, args in sent if task == names.FETCH]
    assert fetched == sorted(sizes, key=lambda name: -(folder / name).stat().st_size)
    assert fetched == ["e-larger.md", "b-large.md", "c-medium.md", "a-small.md", "d-tiny.md"]


# Outages and production timing: services of their own ------------------------------------------

@pytest.fixture
def own(tmp_path):
    """A Redis and a Chroma this test may stop and restart (same ports, same data)."""
    return {"root": tmp_path, "redis_port": free_port(), "chroma_port": free_port()}


def test_a_whole_worker_killed_is_redriven_within_two_minutes_with_production_settings(own, tmp_path, services):
    with redis_server(own["root"], own["redis_port"]) as redis_url:
        fleet_processes = FleetProcesses(redis_url, services["host"], services["port"], own["root"], timing={})
        try:
            fleet_processes.start_worker("a")
            fleet_processes.start_beat()
            folder = tmp_path / "docs"
            write_corpus(folder, documents=1)
            big = folder / "handbook.md"  # long enough that its embedding is in hand when the worker dies
            big.write_text("\n\n".join(f"## Part {n}\n\n{os.urandom(4).hex()} {WORDS * 4}" for n in range(120)))
            fleet = fleet_processes.client("production-timing")
            run_id = enqueue_sync(fleet, spec(folder, "prod"), local_target(fleet.settings))
            held = [keys.member(run_id, side, "handbook.md") for side in (DENSE, SPARSE)]
            wait_until(lambda: any(fleet.redis.hget(keys.HOLDERS, m) for m in held), 240, "the embedding to start")
            fleet_processes.kill("a")
            killed_at = time.monotonic()
            fleet_processes.start_worker("b")
            wait_until(lambda: any(int(fleet.redis.hget(keys.DELIVERIES, m) or 0) >= 2 for m in held)
                       or fleet.runs.get(run_id).status.finished, 170, "the lost step to be re-driven")
            redriven_after = time.monotonic() - killed_at
            assert redriven_after < 120, f"re-driven {redriven_after:.0f}s after the worker died"
            assert fleet_processes.wait_for_run(fleet, run_id, 300).status.value == "complete"
        finally:
            fleet_processes.stop()


def _chroma_processes(redis_url: str, own: dict, **timing: str) -> FleetProcesses:
    from tests.integration.fleet_harness import TEST_TIMING

    return FleetProcesses(redis_url, "127.0.0.1", own["chroma_port"], own["root"], timing={**TEST_TIMING, **timing})


def test_a_chroma_outage_of_30_seconds_mid_run(own, tmp_path):
    folder = tmp_path / "docs"
    write_corpus(folder, documents=12)
    held = "runbook-11.md"
    with redis_server(own["root"], own["redis_port"]) as redis_url:
        fleet_processes = _chroma_processes(redis_url, own, HEADWATER_MAX_DELIVERIES="1000")
        try:
            with chroma_server(own["root"], own["chroma_port"]):
                fleet_processes.start_fleet()
                fleet = fleet_processes.client("outage")
                # One document cannot get past its fetch while this is armed, so the run is unfinished
                # when Chroma goes down by construction, not because the rest happened to be slow.
                fleet.crash.arm("fetch.after_payload", times=1000, uri=held)
                fleet, run_id = fleet_processes.queue_sync("outage", folder, "outage")
                wait_until(lambda: fleet.runs.get(run_id).counters["indexed"] >= 2
                           and fleet.crash.remaining("fetch.after_payload") < 1000, 180, "the run to get going")
            fleet.crash.arm("fetch.after_payload", times=0)  # Chroma is down: the held document needs it too
            time.sleep(30)  # the outage: reads and writes fail and are retried with backoff
            assert not fleet.runs.get(run_id).status.finished
            with chroma_server(own["root"], own["chroma_port"]):
                run = fleet_processes.wait_for_run(fleet, run_id, 400)
                assert run.status.value == "complete", run.to_json()
                assert len(fleet_processes.documents("outage")) == 12
        finally:
            fleet_processes.stop()


def test_a_flush_whose_chroma_stays_down_fails_its_documents_and_retry_recovers(own, tmp_path):
    folder = tmp_path / "docs"
    write_corpus(folder, documents=3)
    with redis_server(own["root"], own["redis_port"]) as redis_url:
        fleet_processes = _chroma_processes(redis_url, own, HEADWATER_TASK_MAX_RETRIES="2",
                                            HEADWATER_RETRY_BACKOFF_MAX_SECONDS="1",
                                            HEADWATER_MAX_DELIVERIES="1000")
        try:
            with chroma_server(own["root"], own["chroma_port"]):
                fleet_processes.start_fleet()
                fleet = fleet_processes.client("down")
                # Every write dies in hand while this is armed: the documents wait at their write,
                # whatever the batch timing, until Chroma is gone.
                fleet.crash.arm("flush.after_take", times=1000)
                fleet, run_id = fleet_processes.queue_sync("down", folder, "down")
                wait_until(lambda: set(fleet.runs.states(run_id).values()) == {"write"}
                           and fleet.crash.remaining("flush.after_take") < 1000, 180,
                           "every document to wait for its write")
            fleet.crash.arm("flush.after_take", times=0)  # Chroma is down for good
            run = fleet_processes.wait_for_run(fleet, run_id, 120)
            assert run.status.value == "complete_with_errors", run.to_json()
            assert set(run.errors) == {f"runbook-{i}.md" for i in range(3)}
            assert all("retries writing to Chroma" in reason for reason in run.errors.values()), run.errors
            with chroma_server(own["root"], own["chroma_port"]):
                again = retry_run(fleet, run_id)
                assert fleet_processes.wait_for_run(fleet, again, 120).status.value == "complete"
                assert len(fleet_processes.documents("down")) == 3
        finally:
            fleet_processes.stop()


def test_redis_restarted_empty_costs_time_not_data(own, tmp_path):
    folder = tmp_path / "docs"
    write_corpus(folder, documents=10)
    with chroma_server(own["root"], own["chroma_port"]):
        with redis_server(own["root"], own["redis_port"]) as redis_url:
            fleet_processes = _chroma_processes(redis_url, own)
            fleet_processes.start_fleet()
            fleet, run_id = fleet_processes.queue_sync("redis-loss", folder, "redis-loss")
            wait_until(lambda: fleet.runs.get(run_id).counters["indexed"] >= 2, 180, "the run to get going")
        # Redis is gone with every queue, run record and payload; it comes back empty.
        try:
            with redis_server(own["root"], own["redis_port"]):
                assert fleet.runs.get(run_id) is None
                _, again = fleet_processes.queue_sync("redis-loss", folder, "redis-loss")
                assert fleet_processes.wait_for_run(fleet, again, 300).status.value == "complete"
                records = fleet_processes.records("redis-loss")
                by_uri: dict[str, list] = {}
                for _, metadata in records.values():
                    by_uri.setdefault(metadata["uri"], []).append(metadata)
                assert len(by_uri) == 10
                for chunks in by_uri.values():  # no partial or doubled documents
                    assert sorted(m["chunk_index"] for m in chunks) == list(range(chunks[0]["chunk_count"]))
        finally:
            fleet_processes.stop()

"""The fleet's state machine against a real Redis: every transition, without workers or models."""

from __future__ import annotations

import json
import time

import pytest
import redis

from headwater.fleet import keys
from headwater.fleet.runs import RunStatus, RunStore, Target
from headwater.fleet.state import DENSE, FETCH, FINISH, LIST, PARSE, SPARSE, WRITE, StateMachine
from headwater.models import DocumentChange, Op
from tests.services import redis_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
TARGET = Target("col", "dense@1", "sparse@1")


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture
def client(redis_url):
    c = redis.Redis.from_url(redis_url)
    c.flushdb()
    return c


def machine(client, **overrides) -> StateMachine:
    options = {"lease_seconds": 30, "redrive_after_seconds": 30, "max_deliveries": 3, "max_retries": 2, **overrides}
    return StateMachine(client, **options)


def listed_run(client, uris, window=32) -> str:
    """A full run whose listing of `uris` is stored and committed."""
    runs, sm = RunStore(client), machine(client)
    run = runs.create("src", {"kind": "folder", "id": "src", "options": {}}, TARGET, window=window)
    runs.store_listing(run.id, [DocumentChange("src", u, Op.UPSERT, version="1") for u in uris], [], [], len(uris))
    assert sm.acquire(run.id, LIST, "", "t-list").status == "ok"
    moved = sm.listed(run.id, "t-list")
    assert moved.status == "next"
    return run.id


def through(sm, run_id, uri, steps_and_next):
    """Acquire and commit a sequence of steps for one document."""
    moved = None
    for step, nxt, next_steps, siblings in steps_and_next:
        assert sm.acquire(run_id, step, uri, f"t-{step}").status == "ok", (step, uri)
        moved = sm.commit(run_id, step, uri, f"t-{step}", nxt, next_steps, siblings)
    return moved


def index_document(sm, run_id, uri):
    return through(sm, run_id, uri, [(FETCH, "parse", (PARSE,), ()), (PARSE, "embed", (DENSE, SPARSE), ()),
                                     (DENSE, "write", (WRITE,), (SPARSE,)), (SPARSE, "write", (WRITE,), (DENSE,)),
                                     (WRITE, "indexed", (), ())])


def test_a_run_completes_from_states_and_admits_through_its_window(client):
    run_id = listed_run(client, ["a", "b", "c"], window=2)
    runs, sm = RunStore(client), machine(client)
    assert runs.states(run_id) == {"a": "fetch", "b": "fetch", "c": "queued"}
    moved = index_document(sm, run_id, "a")
    assert moved.admitted == ["c"] and not moved.finish_due
    index_document(sm, run_id, "b")
    moved = index_document(sm, run_id, "c")
    assert moved.finish_due  # the last open document makes the finish step due
    assert sm.acquire(run_id, FINISH, "", "t-f").status == "ok"
    assert sm.close(run_id, "t-f") == "complete"
    run = runs.get(run_id)
    assert run.status is RunStatus.COMPLETE and run.counters["indexed"] == 3
    assert client.zcard(keys.LEASES) == 0  # nothing left to re-drive


def test_a_replayed_step_finds_it_done_and_a_held_one_busy(client):
    run_id = listed_run(client, ["a"])
    sm = machine(client)
    assert sm.acquire(run_id, FETCH, "a", "first").status == "ok"
    assert sm.acquire(run_id, FETCH, "a", "second").status == "busy"  # one live holder at a time
    sm.commit(run_id, FETCH, "a", "first", "parse", (PARSE,))
    assert sm.acquire(run_id, FETCH, "a", "late").status == "done"  # a redelivered message moves on
    assert sm.commit(run_id, FETCH, "a", "late", "parse", (PARSE,)).status == "lost"


def test_the_join_waits_for_both_embedding_sides(client):
    run_id = listed_run(client, ["a"])
    sm = machine(client)
    through(sm, run_id, "a", [(FETCH, "parse", (PARSE,), ()), (PARSE, "embed", (DENSE, SPARSE), ())])
    assert through(sm, run_id, "a", [(SPARSE, "write", (WRITE,), (DENSE,))]).status == "wait"
    assert through(sm, run_id, "a", [(DENSE, "write", (WRITE,), (SPARSE,))]).status == "next"
    assert client.zrange(keys.due("col", WRITE), 0, -1) == [keys.due_entry(run_id, "a").encode()]


def embed_due(sm, run_id, uri, texts):
    """Fetch and parse one document whose parse leaves `texts` new texts to embed."""
    assert sm.acquire(run_id, FETCH, uri, "t-f").status == "ok"
    sm.commit(run_id, FETCH, uri, "t-f", "parse", (PARSE,))
    assert sm.acquire(run_id, PARSE, uri, "t-p").status == "ok"
    return sm.commit(run_id, PARSE, uri, "t-p", "embed", (DENSE, SPARSE), weight=texts)


def test_embedding_batches_fill_by_texts_oldest_first_across_documents(client):
    run_id = listed_run(client, ["a", "b", "c", "d"])
    sm = machine(client)
    for uri, texts in (("a", 30), ("b", 30), ("c", 50), ("d", 5)):
        embed_due(sm, run_id, uri, texts)
    assert sm.batch_due("col", DENSE, full_weight=200, delay=1) == "later"  # not full: one delayed task
    assert sm.batch_due("col", DENSE, full_weight=200, delay=1) is None  # ... and only one
    assert sm.batch_due("col", DENSE, full_weight=100, delay=1) == "now"  # 115 texts wait: a full batch
    taken, _ = sm.take_batch("col", DENSE, "t-batch", max_docs=10, max_weight=64)
    assert taken == [(run_id, "a"), (run_id, "b"), (run_id, "c")]  # filled past 64 texts, in order
    assert int(client.get(keys.due("col", DENSE) + ":weight")) == 5
    assert sm.acquire(run_id, DENSE, "a", "other").status == "busy"  # each document is held by its own lease
    assert sm.take_batch("col", SPARSE, "t-s", max_docs=1)[0] == [(run_id, "a")]  # sides are queued apart


def test_a_runs_last_documents_go_to_their_batch_without_waiting_for_more(client):
    run_id = listed_run(client, ["a", "b", "c"], window=2)
    sm = machine(client)
    embed_due(sm, run_id, "a", 3)
    # b is still being fetched and c is queued: more texts are coming, so the batch waits for them.
    assert sm.batch_due("col", DENSE, full_weight=64, delay=1, runs=(run_id,)) == "later"
    client.delete(keys.due("col", DENSE) + ":later")
    embed_due(sm, run_id, "b", 3)
    assert sm.batch_due("col", DENSE, full_weight=64, delay=1, runs=(run_id,)) == "later"  # c is still queued
    client.delete(keys.due("col", DENSE) + ":later")
    through(sm, run_id, "a", [(DENSE, "write", (WRITE,), (SPARSE,)), (SPARSE, "write", (WRITE,), (DENSE,)),
                              (WRITE, "indexed", (), ())])  # a ends: c is admitted
    assert sm.batch_due("col", DENSE, full_weight=64, delay=1, runs=(run_id,)) == "later"  # c is being fetched
    client.delete(keys.due("col", DENSE) + ":later")
    embed_due(sm, run_id, "c", 3)
    # Nothing of the run can join the embedding queues any more: the batch goes now, not after the delay.
    assert sm.batch_due("col", DENSE, full_weight=64, delay=1, runs=(run_id,)) == "now"
    assert sm.batch_due("col", DENSE, full_weight=64, delay=1) == "later"  # without runs, the delay as before
    # The write waits while b and c are still embedding, and goes now once the last of them is ready.
    through(sm, run_id, "b", [(DENSE, "write", (WRITE,), (SPARSE,)), (SPARSE, "write", (WRITE,), (DENSE,))])
    assert sm.batch_due("col", WRITE, full_weight=16, delay=1, runs=(run_id,)) == "later"
    client.delete(keys.due("col", WRITE) + ":later")
    through(sm, run_id, "c", [(DENSE, "write", (WRITE,), (SPARSE,)), (SPARSE, "write", (WRITE,), (DENSE,))])
    assert sm.batch_due("col", WRITE, full_weight=16, delay=1, runs=(run_id,)) == "now"
    taken, _ = sm.take_batch("col", WRITE, "t-w", max_docs=64)
    assert sorted(taken) == [(run_id, "b"), (run_id, "c")]
    assert sm.batch_due("col", WRITE, full_weight=16, delay=1, runs=(run_id,)) is None  # nothing left to send


def test_a_batch_document_retried_rejoins_its_queue_after_the_backoff(client):
    run_id = listed_run(client, ["a"])
    sm = machine(client)
    embed_due(sm, run_id, "a", 3)
    assert sm.take_batch("col", DENSE, "t", max_docs=8)[0] == [(run_id, "a")]
    assert sm.fail_attempt(run_id, DENSE, "a", "t", 30, "model failed").status == "retry"
    assert sm.take_batch("col", DENSE, "t2", max_docs=8)[0] == []  # not due before its backoff
    assert int(client.get(keys.due("col", DENSE) + ":weight")) == 3
    client.zadd(keys.due("col", DENSE), {keys.due_entry(run_id, "a"): time.time() - 1})  # the backoff passed
    assert sm.take_batch("col", DENSE, "t3", max_docs=8)[0] == [(run_id, "a")]


def test_a_batch_whose_worker_died_is_redriven_back_into_its_queue(client):
    run_id = listed_run(client, ["a", "b"])
    sm = machine(client, lease_seconds=1)
    embed_due(sm, run_id, "a", 2)
    embed_due(sm, run_id, "b", 2)
    assert len(sm.take_batch("col", DENSE, "dead", max_docs=8)[0]) == 2
    time.sleep(1.2)  # the batch's worker died: its leases expire
    for uri in ("a", "b"):
        assert sm.redrive(keys.member(run_id, DENSE, uri), base=30) == 1
    assert sm.batch_due("col", DENSE, full_weight=4, delay=1) == "now"
    taken, _ = sm.take_batch("col", DENSE, "new", max_docs=8)
    assert sorted(taken) == [(run_id, "a"), (run_id, "b")]
    assert sm.commit(run_id, DENSE, "a", "dead", "write", (WRITE,), (SPARSE,)).status == "lost"


def test_a_document_that_ends_leaves_its_batch_queues_and_a_cancelled_run_is_never_taken(client):
    run_id = listed_run(client, ["a"])
    runs, sm = RunStore(client), machine(client)
    embed_due(sm, run_id, "a", 7)
    assert runs.cancel(run_id)
    run_id2 = listed_run(client, ["b"])
    embed_due(sm, run_id2, "b", 4)
    taken, _ = sm.take_batch("col", SPARSE, "t", max_docs=8)
    assert taken == [(run_id2, "b")]  # the cancelled run's document is dropped, not taken
    assert sm.commit(run_id2, SPARSE, "b", "t", "failed", reason="bad").status == "terminal"
    assert client.zrange(keys.due("col", DENSE), 0, -1) == [keys.due_entry(run_id, "a").encode()]
    assert int(client.get(keys.due("col", DENSE) + ":weight")) == 7  # b's 4 texts left with b


def test_an_expired_lease_is_redriven_and_its_old_holder_cannot_commit(client):
    run_id = listed_run(client, ["a"])
    sm = machine(client, lease_seconds=1)
    assert sm.acquire(run_id, FETCH, "a", "dead").status == "ok"
    time.sleep(1.2)
    member = keys.member(run_id, FETCH, "a")
    assert member in sm.expired()
    assert sm.redrive(member, base=30) == 1
    assert sm.redrive(member, base=30) == 0  # not expired any more: re-sent once, not every sweep
    assert sm.acquire(run_id, FETCH, "a", "new").status == "ok"
    assert sm.commit(run_id, FETCH, "a", "dead", "parse", (PARSE,)).status == "lost"
    assert sm.commit(run_id, FETCH, "a", "new", "parse", (PARSE,)).status == "next"


def test_a_document_whose_worker_keeps_dying_is_a_poison_pill(client):
    run_id = listed_run(client, ["bad", "good"])
    sm = machine(client, lease_seconds=1, max_deliveries=3)
    for attempt in range(3):
        assert sm.acquire(run_id, FETCH, "bad", f"w{attempt}").status == "ok"
        time.sleep(1.1)  # the worker died: its lease expires
        sm.redrive(keys.member(run_id, FETCH, "bad"), base=0.01)
        time.sleep(0.05)
    assert sm.acquire(run_id, FETCH, "bad", "w3").status == "poisoned"
    run = RunStore(client).get(run_id)
    assert run.counters["failed"] == 1 and "poison pill" in run.errors["bad"]
    assert index_document(sm, run_id, "good").finish_due


def test_retries_are_counted_and_end_failed_past_the_budget(client):
    run_id = listed_run(client, ["a"])
    sm = machine(client, max_retries=2)
    for _ in range(2):
        assert sm.acquire(run_id, FETCH, "a", "t").status == "ok"
        assert sm.fail_attempt(run_id, FETCH, "a", "t", 0, "Chroma down").status == "retry"
        client.zadd(keys.LEASES, {keys.member(run_id, FETCH, "a"): time.time()})
    assert sm.acquire(run_id, FETCH, "a", "t").status == "ok"
    moved = sm.fail_attempt(run_id, FETCH, "a", "t", 0, "gave up: Chroma down")
    assert moved.status == "gave_up" and moved.finish_due
    assert RunStore(client).get(run_id).errors == {"a": "gave up: Chroma down"}


def test_a_cancelled_run_stops_its_steps(client):
    run_id = listed_run(client, ["a"])
    runs, sm = RunStore(client), machine(client)
    assert runs.cancel(run_id)
    assert sm.acquire(run_id, FETCH, "a", "t").status == "finished"
    assert sm.redrive(keys.member(run_id, FETCH, "a"), base=1) in (0, -1)


def test_live_changes_are_accepted_once_and_only_when_newer(client):
    runs = RunStore(client)
    old, new = (DocumentChange("src", "a.md", Op.UPSERT, sequence=f"{n:020d}") for n in (1, 2))
    assert runs.accept_live("src", new)
    assert not runs.accept_live("src", new)  # the same change again
    assert not runs.accept_live("src", old)  # an older one, late
    # Writes: an older change may write until a newer one has written, never after.
    assert runs.claim_order("src", old) and runs.claim_order("src", new)
    assert not runs.claim_order("src", old) and runs.claim_order("src", new)


def test_history_keeps_unfinished_runs_and_the_newest_finished_per_source(client):
    runs = RunStore(client, history=2)
    spec = {"kind": "folder", "id": "src", "options": {}}
    open_run = runs.create("src", spec, TARGET)
    finished = []
    for _ in range(3):
        run = runs.create("src", spec, TARGET)
        runs.cancel(run.id)
        finished.append(run.id)
    runs.create("other", {**spec, "id": "other"}, TARGET)  # another source's runs do not count
    latest = runs.create("src", spec, TARGET)  # trimming happens as runs are created
    kept = {r.id for r in runs.list(10, "src")}
    assert kept == {open_run.id, latest.id, *finished[1:]}
    assert runs.spec(open_run.id) == spec  # a run's source spec lives as long as its run


def test_an_older_run_never_overwrites_a_newer_one(client):
    runs = RunStore(client)
    spec = {"kind": "folder", "id": "docs", "options": {}}
    older, newer = runs.create("docs", spec, TARGET), runs.create("docs", spec, TARGET)
    assert newer.seq == older.seq + 1
    assert runs.claim_document("docs", "a.md", older.seq)
    assert runs.claim_document("docs", "a.md", newer.seq)
    assert not runs.claim_document("docs", "a.md", older.seq)  # a late write of the older run
    assert runs.claim_document("docs", "a.md", newer.seq)  # a repeated write of the newer run is fine
    assert runs.claim_document("other", "a.md", 1)  # sources are independent


def test_a_run_carries_its_target_and_finished_runs_stay_finished(client):
    runs = RunStore(client)
    run = runs.create("docs", {"kind": "folder", "id": "docs", "options": {}}, TARGET)
    assert runs.get(run.id).target == TARGET
    assert runs.fail_run(run.id, "cannot list /srv/docs")
    assert not runs.cancel(run.id) and runs.get(run.id).status is RunStatus.FAILED
    assert runs.get(run.id).errors == {"(source)": "cannot list /srv/docs"}


def test_one_run_at_a_time_works_on_a_document(client):
    first, second = listed_run(client, ["a.md"]), listed_run(client, ["a.md"])
    sm = machine(client)
    claim = keys.document_claim("col", "src", "a.md")
    assert sm.acquire(first, FETCH, "a.md", "t1").status == "ok"
    assert sm.claim_document(first, "a.md", claim, 60)
    assert sm.acquire(second, FETCH, "a.md", "t2").status == "ok"
    assert not sm.claim_document(second, "a.md", claim, 60)  # in flight in the first run
    assert sm.defer(second, FETCH, "a.md", "t2", 0)  # handed back: no delivery, no attempt counted
    assert int(client.hget(keys.DELIVERIES, keys.member(second, FETCH, "a.md")) or 0) == 0
    sm.commit(first, FETCH, "a.md", "t1", "unchanged")  # the first run's document ends
    assert sm.acquire(second, FETCH, "a.md", "t3").status == "ok"
    assert sm.claim_document(second, "a.md", claim, 60)


def test_a_step_whose_holder_stopped_renewing_shows_as_stalled_until_re_driven(client):
    run_id = listed_run(client, ["a", "b"])
    sm = machine(client, lease_seconds=1)
    assert sm.acquire(run_id, FETCH, "a", "t-lost").status == "ok"  # its worker dies holding it
    assert sm.acquire(run_id, FETCH, "b", "t-alive").status == "ok"
    assert sm.stalled(run_id) == []  # within the lease: nobody can tell yet
    time.sleep(1.2)
    sm.renew("t-alive", [keys.member(run_id, FETCH, "b")])  # a live worker keeps renewing
    stalled = sm.stalled(run_id)
    assert [(step, uri) for step, uri, _ in stalled] == [(FETCH, "a")]
    assert time.time() - 2 < stalled[0][2] <= time.time()
    assert sm.stalled("another-run") == []
    for lease in sm.expired():
        sm.redrive(lease, 30)
    assert sm.stalled(run_id) == []  # re-driven: a deadline in the future again



def test_a_step_queued_but_never_taken_is_not_blamed_on_a_lost_worker(client):
    runs, sm = RunStore(client), machine(client, lease_seconds=1, redrive_after_seconds=1)
    run = runs.create("src", {"kind": "folder", "id": "src", "options": {}}, TARGET)
    runs.store_listing(run.id, [DocumentChange("src", u, Op.UPSERT, version="1") for u in ("a", "b")], [], [], 2)
    assert sm.acquire(run.id, LIST, "", "t-list").status == "ok"
    assert sm.listed(run.id, "t-list").status == "next"  # both fetches queued, due to start within 1 s
    assert sm.acquire(run.id, FETCH, "a", "t-lost").status == "ok"  # a's worker dies holding it; b is never taken
    time.sleep(1.2)
    assert [(step, uri) for step, uri, _ in sm.stalled(run.id)] == [(FETCH, "a")]
    assert [(step, uri) for step, uri, _ in sm.unsent(run.id)] == [(FETCH, "b")]

def test_the_worker_registry_says_who_is_online_what_each_runs_and_who_was_lost(client):
    from headwater.fleet import worker_registry
    from headwater.fleet.worker_registry import WorkerRegistry

    registry = WorkerRegistry(client)
    registry.heartbeat("headwater-1@a", ["headwater.fetch"], 2, 100.0)
    registry.heartbeat("headwater-2@a", ["headwater.embed.dense"], 1, 100.0)
    registry.step_started("headwater-1@a", 4242, "headwater.fetch_document", {"run_id": "r", "document": "a.md"})
    listed = {w["name"]: w for w in registry.workers()}
    assert listed["headwater-1@a"]["state"] == "online" and listed["headwater-1@a"]["concurrency"] == 2
    assert [s["document"] for s in listed["headwater-1@a"]["current_steps"]] == ["a.md"]
    registry.step_ended("headwater-1@a", 4242)
    assert registry.workers()[0]["current_steps"] == []
    registry.stopped("headwater-2@a")
    # A heartbeat older than the offline limit: its worker is lost, shown with when it was last seen.
    stale = json.loads(client.hget(keys.WORKERS, "headwater-1@a"))
    stale["last_seen"] -= worker_registry.OFFLINE_AFTER_SECONDS + 1
    client.hset(keys.WORKERS, "headwater-1@a", json.dumps(stale))
    assert {w["name"]: w["state"] for w in registry.workers()} == {"headwater-1@a": "offline", "headwater-2@a": "stopped"}
    stale["last_seen"] -= worker_registry.FORGET_AFTER_SECONDS
    client.hset(keys.WORKERS, "headwater-1@a", json.dumps(stale))
    assert [w["name"] for w in registry.workers()] == ["headwater-2@a"]  # forgotten after a day


def test_a_worker_restarted_under_its_name_does_not_show_its_killed_predecessors_steps(client):
    """A pod restarted after an OOM kill keeps its name: the steps its predecessor was running when killed
    (never ended: nothing was left to clear them) are not this worker's, and it is running nothing yet."""
    from headwater.fleet.worker_registry import WorkerRegistry

    registry = WorkerRegistry(client)
    registry.heartbeat("pod-0@node", ["headwater.parse"], 2, 100.0)
    registry.step_started("pod-0@node", "41:1", "headwater.parse_document", {"run_id": "r", "document": "big.pdf"})
    registry.step_started("pod-0@node", "42:1", "headwater.parse_document", {"run_id": "r", "document": "huge.pdf"})
    # SIGKILLed: no step_ended, no stopped. The new process starts under the same name.
    registry.started("pod-0@node")
    registry.heartbeat("pod-0@node", ["headwater.parse"], 2, 200.0)
    (worker,) = registry.workers()
    assert worker["state"] == "online" and worker["started_at"] == 200.0 and worker["current_steps"] == []
    registry.step_started("pod-0@node", "77:1", "headwater.parse_document", {"run_id": "r", "document": "big.pdf"})
    assert [s["document"] for s in registry.workers()[0]["current_steps"]] == ["big.pdf"]  # its own steps show


def test_a_lost_workers_unstarted_messages_are_sent_again_as_soon_as_it_is_seen_offline(client, redis_url):
    """A worker killed with messages it had taken but not started (a delayed batch task waits in the
    worker's memory until it is due) takes them along. The sweeper re-sends every queued step that no worker
    holds when it first sees the worker offline, instead of after the re-send delay (120 s by default); a
    step a live worker holds is left alone, and each loss is answered once."""
    from headwater.fleet import steps, worker_registry
    from headwater.fleet.context import Fleet
    from headwater.settings import Settings

    sent: list[tuple[str, list]] = []
    fleet = Fleet(Settings(redis_url=redis_url, redrive_after_seconds=120),
                  lambda task, args, countdown=None: sent.append((task, args)))
    run_id = listed_run(client, ["a", "b"])
    assert fleet.state.acquire(run_id, FETCH, "a", "alive").status == "ok"
    registry = worker_registry.WorkerRegistry(client)
    registry.heartbeat("pod-0@node", ["headwater.fetch"], 1, 100.0)
    assert steps.sweep(fleet) == 0 and sent == []  # all online: queued "b" waits its turn

    lost = json.loads(client.hget(keys.WORKERS, "pod-0@node"))
    lost["last_seen"] -= worker_registry.OFFLINE_AFTER_SECONDS + 1
    client.hset(keys.WORKERS, "pod-0@node", json.dumps(lost))
    assert steps.sweep(fleet) == 1
    assert sent == [(steps.TASK_OF_STEP[FETCH], [run_id, "b"])]  # "a" is held by a live worker
    assert steps.sweep(fleet) == 0 and len(sent) == 1  # the loss was answered; "b" waits its grown gap now
    assert fleet.state.acquire(run_id, FETCH, "b", "new").status == "ok"

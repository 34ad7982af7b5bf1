"""Run records against a real Redis."""

from __future__ import annotations

import pytest
import redis

from headwater.runs import RunStatus, RunStore
from tests.services import redis_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture
def runs(redis_url):
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    return RunStore(client)


def test_a_run_moves_through_its_states_with_counters_and_errors(runs):
    run = runs.create("docs")
    assert runs.get(run.id).status is RunStatus.PENDING
    assert runs.start(run.id)
    runs.count(run.id, "scanned", 3)
    runs.count(run.id, "indexed", 2)
    runs.record_error(run.id, "bad.pdf", "could not be parsed as PDF")
    runs.record_error(run.id, "bad.pdf", "retried and failed again")  # counted once
    assert runs.finish(run.id) is RunStatus.COMPLETE_WITH_ERRORS
    stored = runs.get(run.id)
    assert stored.counters["scanned"] == 3 and stored.counters["indexed"] == 2 and stored.counters["failed"] == 1
    assert stored.errors == {"bad.pdf": "could not be parsed as PDF"}
    assert stored.started_at <= stored.finished_at
    assert runs.finish(run.id, failed=True) is RunStatus.COMPLETE_WITH_ERRORS  # finished runs stay finished


def test_cancelled_runs_stay_cancelled(runs):
    run = runs.create("docs")
    runs.start(run.id)
    assert runs.cancel(run.id) and runs.is_cancelled(run.id)
    assert runs.finish(run.id) is RunStatus.CANCELLED
    assert not runs.cancel(run.id)


def test_an_older_run_never_overwrites_a_newer_one(runs):
    older, newer = runs.create("docs"), runs.create("docs")
    assert newer.seq == older.seq + 1
    assert runs.claim_document("docs", "a.md", older.seq)
    assert runs.claim_document("docs", "a.md", newer.seq)
    assert not runs.claim_document("docs", "a.md", older.seq)  # a late task of the older run
    assert runs.claim_document("docs", "a.md", newer.seq)  # retries of the newer run are fine
    assert runs.claim_document("other", "a.md", 1)  # sources are independent


def test_runs_are_listed_newest_first(runs):
    created = [runs.create("docs").id for _ in range(3)]
    assert [r.id for r in runs.list()] == list(reversed(created))
    assert runs.list()[0].to_json()["status"] == "pending"


def test_unknown_counters_are_refused(runs):
    with pytest.raises(ValueError):
        runs.count(runs.create("docs").id, "bogus")

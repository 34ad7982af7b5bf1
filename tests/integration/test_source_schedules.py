"""Per-source schedules in the fleet (celery-redbeat): the next run shown is the one beat acts on, and
re-saving an entry (every serve start does) keeps it."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import pytest

from headwater.settings import Settings
from headwater.sources.model import SourceConfig
from schedules.source_schedules import _key, next_run_at, save_entry
from tests.services import redis_server
from workers.celery_app import create_app

pytestmark = pytest.mark.timeout(60)
TARGET = {"collection": "headwater", "dense_model": "d", "sparse_model": "s"}


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield create_app(Settings(redis_url=url))


def _source(interval: float) -> SourceConfig:
    return SourceConfig(id="docs", kind="folder", options={"path": "/srv/docs"}, schedule_interval_seconds=interval)


def _beat_fired(app, at: float, interval: float) -> None:
    """What beat writes when it fires an entry at `at`: the run time, and the next due time as the score."""
    from redbeat.decoder import RedBeatJSONEncoder
    from redbeat.schedulers import ensure_conf, get_redis

    key = _key(app, "docs")
    redis = get_redis(app)
    meta = {"last_run_at": datetime.fromtimestamp(at, timezone.utc), "total_run_count": 1}
    redis.hset(key, "meta", json.dumps(meta, cls=RedBeatJSONEncoder))
    redis.zadd(ensure_conf(app).schedule_key, {key: at + interval})


def test_next_run_is_beats_due_time_halfway_through_an_interval(app):
    save_entry(app, _source(900), {"id": "docs"}, TARGET)
    assert next_run_at(app, "docs") == pytest.approx(time.time() + 900, abs=5)
    _beat_fired(app, time.time() - 450, 900)  # beat ran it 7.5 minutes ago
    assert next_run_at(app, "docs") == pytest.approx(time.time() + 450, abs=5)


def test_saving_again_as_a_restarted_serve_does_keeps_the_next_run(app):
    save_entry(app, _source(900), {"id": "docs"}, TARGET)
    _beat_fired(app, time.time() - 450, 900)
    save_entry(app, _source(900), {"id": "docs", "options": {"changed": True}}, TARGET)
    assert next_run_at(app, "docs") == pytest.approx(time.time() + 450, abs=5)


def test_a_changed_period_starts_now(app):
    save_entry(app, _source(900), {"id": "docs"}, TARGET)
    _beat_fired(app, time.time() - 450, 900)
    save_entry(app, _source(600), {"id": "docs"}, TARGET)
    assert next_run_at(app, "docs") == pytest.approx(time.time() + 600, abs=5)


def test_a_source_without_a_schedule_has_no_entry(app):
    save_entry(app, _source(900), {"id": "docs"}, TARGET)
    save_entry(app, SourceConfig(id="docs", kind="folder", options={"path": "/srv/docs"}), {"id": "docs"}, TARGET)
    assert next_run_at(app, "docs") is None



def test_a_cron_entry_runs_next_on_its_minute_not_a_second_before(app):
    """redbeat scores an entry truncated to the second, a hair before it is due: 02:59:59 for 03:00."""
    save_entry(app, SourceConfig(id="docs", kind="folder", options={"path": "/srv/docs"}, schedule_cron="0 3 * * *"),
               {"id": "docs"}, TARGET)
    now = datetime.now(timezone.utc)
    three = now.replace(hour=3, minute=0, second=0, microsecond=0)
    expected = (three if three > now else three + timedelta(days=1)).timestamp()
    assert next_run_at(app, "docs") == expected

"""The HTTP app's pure parts: source validation, schedules, tokens, sessions and CSRF (no services)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from pydantic import SecretStr
from starlette.requests import Request

from headwater.http.auth import SESSION_COOKIE, Auth
from headwater.http.runs_view import with_progress
from connectors import InvalidSource
from headwater.http.sources import parse_stored_source
from headwater.settings import Settings
from headwater.sources.model import SourceConfig
from schedules.source_schedules import busy_run, parse_cron, source_schedule

TOKEN = "unit-admin-token-0123456789"


def request_with(headers: dict[str, str] | None = None, cookies: dict[str, str] | None = None) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    if cookies:
        raw.append((b"cookie", "; ".join(f"{k}={v}" for k, v in cookies.items()).encode()))
    return Request({"type": "http", "method": "GET", "path": "/", "headers": raw, "query_string": b""})


@pytest.mark.timeout(10)
def test_source_validation(tmp_path):
    ok = SourceConfig.parse({"id": "docs", "kind": "folder", "options": {"path": str(tmp_path)},
                             "schedule_interval_seconds": 60})
    assert ok.options == {"path": str(tmp_path)}  # what was given, normalised; defaults stay the model's
    bad = [dict(options={"path": "relative"}), dict(options={"path": str(tmp_path / "missing")}),
           dict(options={"path": str(tmp_path)}, schedule_cron="61 * * * *"),
           dict(options={"path": str(tmp_path)}, schedule_cron="* * *"),
           dict(options={"path": str(tmp_path)}, schedule_cron="* * * * *", schedule_interval_seconds=60),
           dict(options={"path": str(tmp_path), "bucket": "x"}),
           dict(options={"path": str(tmp_path)}, secrets={"token": "DOCS_TOKEN"}),  # not a field: secrets are *_env options
           dict(options={"path": str(tmp_path), "token_env": "hunter2-is-my-password"})]
    for fields in bad:
        with pytest.raises(InvalidSource) as error:
            SourceConfig.parse({"id": "docs", "kind": "folder", **fields})
        assert "hunter2" not in str(error.value)
    with pytest.raises(InvalidSource, match="^id: "):
        SourceConfig.parse({"id": "../etc", "kind": "folder", "options": {"path": str(tmp_path)}})
    settings = Settings(folder_roots=[tmp_path / "elsewhere"])
    with pytest.raises(InvalidSource, match="options.path: .*FOLDER_ROOTS"):
        parse_stored_source(ok.model_dump(), settings)
    parse_stored_source(ok.model_dump(), Settings(folder_roots=[tmp_path.parent]))


@pytest.mark.timeout(10)
def test_schedules_from_config():
    every = source_schedule(SourceConfig(id="a", kind="folder", schedule_interval_seconds=90))
    assert every.run_every == timedelta(seconds=90)
    cron = source_schedule(SourceConfig(id="a", kind="folder", schedule_cron="30 3 * * 1-5"))
    last = datetime.now(timezone.utc)
    due = (last + cron.remaining_estimate(last)).astimezone(timezone.utc)
    due = (due + timedelta(seconds=1)).replace(second=0, microsecond=0)  # the estimate is "next minus now"
    assert (due.hour, due.minute) == (3, 30) and due.weekday() < 5 and due > last
    assert source_schedule(SourceConfig(id="a", kind="folder")) is None
    with pytest.raises(ValueError):
        parse_cron("every day")


@pytest.mark.timeout(10)
def test_busy_run_is_the_unfinished_one():
    class Status:
        def __init__(self, finished: bool) -> None:
            self.finished = finished

    class Run:
        def __init__(self, run_id: str, finished: bool) -> None:
            self.id, self.status = run_id, Status(finished)

    assert busy_run([Run("a", True), Run("b", False)]).id == "b"
    assert busy_run([Run("a", True)]) is None


@pytest.mark.timeout(10)
def test_progress_counts_processed_documents():
    running = with_progress({"status": "running", "queued": 10, "indexed": 3, "skipped": 1, "failed": 1,
                             "errors": {"x.md": "bad"}})
    assert running["progress"] == {"done": 5, "total": 10} and not running["finished"]
    assert running["failed_documents"] == [{"uri": "x.md", "reason": "bad"}]
    assert with_progress({"status": "complete", "queued": 2, "errors": {}})["progress"] == {"done": 2, "total": 2}


@pytest.mark.timeout(10)
def test_token_401_without_403_with_a_wrong_one():
    from fastapi import HTTPException

    auth = Auth(Settings(admin_token=SecretStr(TOKEN)))
    auth.require_token(request_with({"Authorization": f"Bearer {TOKEN}"}))
    for headers, status in [({}, 401), ({"Authorization": TOKEN}, 401), ({"Authorization": "Bearer wrong"}, 403),
                            ({"Authorization": f"Bearer {TOKEN}x"}, 403)]:
        with pytest.raises(HTTPException) as refused:
            auth.require_token(request_with(headers))
        assert refused.value.status_code == status and TOKEN not in str(refused.value.detail)


@pytest.mark.timeout(10)
def test_serve_refuses_to_start_without_a_strong_token():
    with pytest.raises(ValueError, match="HEADWATER_ADMIN_TOKEN"):
        Auth(Settings())
    with pytest.raises(ValueError):
        Auth(Settings(admin_token=SecretStr("short")))


@pytest.mark.timeout(10)
def test_sessions_are_signed_and_die_with_the_token():
    from fastapi import HTTPException

    auth = Auth(Settings(admin_token=SecretStr(TOKEN)))
    cookie = auth.new_session()
    session = auth.session(request_with(cookies={SESSION_COOKIE: cookie}))
    assert session is not None and TOKEN not in cookie
    auth.check_csrf(session, session["csrf"])
    for wrong in (None, "", session["csrf"] + "x"):
        with pytest.raises(HTTPException):
            auth.check_csrf(session, wrong)
    assert auth.session(request_with(cookies={SESSION_COOKIE: cookie[:-2] + "xx"})) is None
    rotated = Auth(Settings(admin_token=SecretStr(TOKEN + "-rotated")))
    assert rotated.session(request_with(cookies={SESSION_COOKIE: cookie})) is None


@pytest.mark.timeout(10)
def test_wrong_tokens_are_throttled_per_address_and_kind():
    from headwater.http.throttle import FAILURES, FailureThrottle

    throttle = FailureThrottle()
    assert [throttle.failed("login", "10.0.0.1") for _ in range(FAILURES)] == [None] * FAILURES
    wait = throttle.failed("login", "10.0.0.1")
    assert wait is not None and 0 < wait <= 60
    assert throttle.failed("login", "10.0.0.2") is None and throttle.failed("bearer", "10.0.0.1") is None


def test_a_cancelled_run_shows_how_far_it_got_and_a_complete_one_all_of_it():
    from headwater.http.runs_view import with_progress

    cancelled = with_progress({"status": "cancelled", "queued": 121, "indexed": 3, "skipped": 0, "failed": 0})
    assert cancelled["progress"] == {"done": 3, "total": 121} and cancelled["finished"]
    complete = with_progress({"status": "complete", "queued": 121, "indexed": 119, "skipped": 1, "failed": 0})
    assert complete["progress"] == {"done": 121, "total": 121}


def test_the_run_page_says_which_steps_a_lost_worker_held_and_when_they_run_again():
    from headwater.http.admin import templates
    from headwater.http.runs_view import with_progress

    run = with_progress({"id": "r1", "source_id": "docs", "kind": "full", "status": "running", "started_at": 1.0,
                         "finished_at": None, "queued": 10, "indexed": 4, "skipped": 0, "failed": 0, "errors": {}})
    run["stalled"] = [{"step": "parse", "uri": "big.pdf", "lease_expired_at": 1_800_000_000.0,
                       "redrive_by": 1_800_000_005.0}]
    html = templates.get_template("_run.html").render(run=run, session={"csrf": "x"})
    assert "1 step held by a lost worker" in html and "big.pdf" in html
    assert "2027-01-15" in html  # the re-drive time, in UTC
    del run["stalled"]
    assert "lost worker" not in templates.get_template("_run.html").render(run=run, session={"csrf": "x"})


def test_steps_never_started_are_not_blamed_on_a_lost_worker():
    from headwater.http.admin import templates
    from headwater.http.runs_view import with_progress

    run = with_progress({"id": "r1", "source_id": "docs", "kind": "full", "status": "running", "started_at": 1.0,
                         "finished_at": None, "queued": 10, "indexed": 4, "skipped": 0, "failed": 0, "errors": {}})
    run["stalled"] = []
    run["unsent"] = [{"step": "fetch", "uri": "a.md", "due_at": 1_800_000_000.0, "redrive_by": 1_800_000_005.0}]
    html = templates.get_template("_run.html").render(run=run, session={"csrf": "x"})
    assert "lost worker" not in html
    assert "1 step queued but not started in time" in html and "a.md" in html and "2027-01-15" in html


def test_times_under_a_minute_are_said_in_seconds():
    import time

    from headwater.http.admin import _when

    now = time.time()
    assert _when(now) == "just now"
    assert _when(now - 42.5) == "42 s ago"  # a worker last seen 42 s ago was not seen "just now"
    assert _when(now + 30.5) in ("in 30 s", "in 29 s")
    assert _when(now - 600) == "10 min ago" and _when(None) == "—"


def test_an_offline_workers_running_steps_are_not_known():
    from headwater.http.admin import templates

    workers = [{"name": "w1@h", "state": "offline", "last_seen": 1.0, "queues": ["headwater.fetch"], "concurrency": 1,
                "current_steps": [{"task": "headwater.fetch_document", "document": "stale.md"}]},
               {"name": "w2@h", "state": "online", "last_seen": 1.0, "queues": ["headwater.fetch"], "concurrency": 1,
                "current_steps": []}]
    html = templates.get_template("_live.html").render(sources=[], queues={}, runs=[], workers=workers,
                                                       session={"csrf": "x"})
    offline, online = html.split('data-worker="w2@h"')
    assert "stale.md" not in offline and '<td class="running"><span class="sub" title="not known' in offline
    assert "idle" in online

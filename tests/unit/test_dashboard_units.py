"""The dashboard's pure parts: intervals as people write them, where folder sources may point, what the
source page shows, and the flash that carries a form post's outcome across its redirect."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fastapi import Response
from itsdangerous import URLSafeTimedSerializer
from starlette.requests import Request

from connectors import InvalidSource
from headwater.http.flash import FLASH_COOKIE, CookieFlashes, Flash
from headwater.http.folder_roots import SETTING, allowed_roots, default_roots, refusal
from headwater.http.source_forms import option_fields
from headwater.http.source_view import duration_text, form_values, run_seconds, schedule_text
from headwater.settings import Settings
from headwater.sources.intervals import format_interval, parse_interval
from headwater.sources.model import SourceConfig


@pytest.mark.timeout(10)
@pytest.mark.parametrize("text, seconds", [("7200", 7200), ("7200.5", 7200.5), ("2h", 7200), ("2 H", 7200),
                                           ("90m", 5400), ("1h30m", 5400), ("1d", 86400), ("45s", 45),
                                           ("1.5h", 5400)])
def test_intervals_read_as_people_write_them(text, seconds):
    assert parse_interval(text) == seconds


@pytest.mark.timeout(10)
@pytest.mark.parametrize("text", ["every hour", "", "2x", "h", "1h-5m", "two hours"])
def test_an_interval_that_is_not_one_says_how_to_write_it(text):
    with pytest.raises(ValueError, match="write seconds .* or a duration such as 2h"):
        parse_interval(text)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("seconds, shown", [(7200.0, "2h"), (5400.0, "90m"), (86400.0, "1d"), (90.0, "90"),
                                            (45.0, "45"), (1.5, "1.5"), (1234567.0, "1234567"), (None, "")])
def test_stored_intervals_are_shown_as_a_person_writes_them_and_read_back_the_same(seconds, shown):
    assert format_interval(seconds) == shown
    if seconds is not None:
        assert parse_interval(shown) == seconds


@pytest.mark.timeout(10)
def test_the_source_model_takes_a_written_interval_and_refuses_words_in_words(tmp_path):
    config = SourceConfig.parse({"id": "a", "kind": "folder", "options": {"path": str(tmp_path)},
                                 "schedule_interval_seconds": "2h"})
    assert config.schedule_interval_seconds == 7200
    assert form_values(config)["schedule_interval_seconds"] == "2h"
    assert schedule_text(config) == "every 2h"
    with pytest.raises(InvalidSource) as refused:
        SourceConfig.parse({"id": "a", "kind": "folder", "options": {"path": str(tmp_path)},
                            "schedule_interval_seconds": "every hour"})
    message = str(refused.value)
    assert message.startswith("schedule_interval_seconds: ") and "2h" in message
    assert "could not convert" not in message and "float" not in message
    with pytest.raises(InvalidSource, match="schedule_interval_seconds: .*greater than or equal to 1"):
        SourceConfig.parse({"id": "a", "kind": "folder", "options": {"path": str(tmp_path)},
                            "schedule_interval_seconds": "0s"})


@pytest.mark.timeout(10)
def test_option_numbers_are_shown_as_typed():
    fields = {f.name: f for f in option_fields("web", {"start_urls": ["https://x.example/"], "delay_seconds": 2.0,
                                                       "max_pages": 50})}
    assert fields["delay_seconds"].value == "2" and fields["max_pages"].value == "50"


@pytest.mark.timeout(10)
def test_schedule_and_durations_in_words():
    assert schedule_text(SourceConfig(id="a", kind="folder", schedule_cron="0 3 * * *")) == "cron 0 3 * * * (UTC)"
    assert schedule_text(SourceConfig(id="a", kind="folder")) == "manual"
    assert [duration_text(s) for s in (None, 0.42, 12.4, 185, 7800)] == ["—", "0.4 s", "12 s", "3 min 5 s", "2 h 10 min"]
    assert run_seconds({"started_at": 100.0, "finished_at": 112.5, "finished": True}) == 12.5
    assert run_seconds({"started_at": 100.0, "finished_at": None, "finished": False}, now=130.0) == 30.0
    assert run_seconds({"started_at": None, "finished": False}) is None
    assert run_seconds({"started_at": 100.0, "finished_at": None, "finished": True}) is None  # cancelled before it ran


# Where folder sources may point ----------------------------------------------------------------


@pytest.mark.timeout(10)
@pytest.mark.parametrize("cwd", ["/", "/etc", "/usr", "/usr/local/share", "/var", "/proc", "/sys", "/tmp", "/home",
                                 "/root", "/srv"])
def test_no_default_folder_root_where_serve_starts_in_a_system_or_shared_directory(cwd, tmp_path):
    roots, why = default_roots(Path(cwd), tmp_path / "someone")
    assert roots == [] and why


@pytest.mark.timeout(10)
def test_the_default_folder_root_is_where_serve_started_unless_that_is_the_home_directory(tmp_path):
    home = tmp_path / "home" / "ops"
    project = home / "handbook"
    project.mkdir(parents=True)
    assert default_roots(home, home) == ([], f"serve was started in the home directory {home.resolve()}")
    assert default_roots(project, home) == ([project.resolve()], "")
    assert default_roots(Path("/home/someone-else"), home)[0] == []


@pytest.mark.timeout(10)
def test_folder_paths_are_resolved_before_they_are_checked(tmp_path):
    root = tmp_path / "root"
    (root / "docs").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", root / "link-out")
    os.symlink("/etc", root / "etc-link")
    settings = Settings()  # HEADWATER_FOLDER_ROOTS unset: where serve started
    assert refusal(str(root / "docs"), settings, cwd=root, home=tmp_path / "h") is None
    assert refusal(str(root), settings, cwd=root, home=tmp_path / "h") is None
    for escape in (root / "link-out", root / "etc-link", root / "docs" / ".." / ".." / "outside"):
        why = refusal(str(escape), settings, cwd=root, home=tmp_path / "h")
        assert why is not None and why.startswith("is outside the directories") and SETTING in why, escape


@pytest.mark.timeout(10)
def test_without_roots_folder_sources_are_refused_naming_the_setting(tmp_path):
    why = refusal(str(tmp_path), Settings(), cwd=Path("/"), home=tmp_path)
    assert why is not None and SETTING in why and "started in /" in why
    explicit = Settings(folder_roots=[])
    assert allowed_roots(explicit)[0] == [] and SETTING in refusal(str(tmp_path), explicit)
    assert refusal(str(tmp_path / "x"), Settings(folder_roots=[tmp_path]), cwd=Path("/")) is None


@pytest.mark.timeout(10)
def test_the_api_check_uses_the_default_roots(tmp_path, monkeypatch):
    from headwater.http.sources import parse_stored_source

    inside = tmp_path / "docs"
    inside.mkdir()
    body = {"id": "docs", "kind": "folder", "options": {"path": str(inside)}}
    monkeypatch.chdir(tmp_path)
    assert parse_stored_source(body, Settings()).options["path"] == str(inside.resolve())
    monkeypatch.chdir(inside)
    with pytest.raises(InvalidSource, match=f"options.path: is outside .*{SETTING}"):
        parse_stored_source({**body, "options": {"path": str(tmp_path)}}, Settings())
    monkeypatch.chdir("/")
    with pytest.raises(InvalidSource, match=f"options.path: folder sources cannot be added .*{SETTING}"):
        parse_stored_source(body, Settings())


# The flash -------------------------------------------------------------------------------------


def _request(cookie: str | None) -> Request:
    headers = [(b"cookie", f"{FLASH_COOKIE}={cookie}".encode())] if cookie else []
    return Request({"type": "http", "method": "GET", "path": "/admin", "headers": headers, "query_string": b""})


def _cookie(response: Response) -> str:
    header = response.headers["set-cookie"]
    assert "httponly" in header.lower() and "samesite=strict" in header.lower() and "Path=/admin" in header
    return header.split(";")[0].split("=", 1)[1]


@pytest.mark.timeout(10)
def test_a_cookie_flash_is_signed_and_belongs_to_its_session():
    flashes = CookieFlashes(URLSafeTimedSerializer(b"secret", salt="flash"), secure=True)
    mine, other = {"csrf": "mine"}, {"csrf": "other"}
    response = Response()
    flashes.put(response, mine, Flash("options.path: required", 422, {"id": "docs", "path": ""}))
    cookie = _cookie(response)
    shown = flashes.take(_request(cookie), mine)
    assert shown == Flash("options.path: required", 422, {"id": "docs", "path": ""}) and shown.refused
    assert flashes.take(_request(cookie), other) is None  # another login's page never shows it
    assert flashes.take(_request(cookie[:-2] + "xx"), mine) is None  # forged text is never shown
    forged = CookieFlashes(URLSafeTimedSerializer(b"not-the-secret", salt="flash"), secure=True)
    response = Response()
    forged.put(response, mine, Flash("Your session expired: log in at evil.example"))
    assert flashes.take(_request(_cookie(response)), mine) is None
    assert not Flash("Saved.").refused


@pytest.mark.timeout(10)
def test_a_refused_form_too_long_for_a_cookie_keeps_its_message():
    flashes = CookieFlashes(URLSafeTimedSerializer(b"secret", salt="flash"), secure=False)
    response = Response()
    flashes.put(response, {"csrf": "c"}, Flash("options.start_urls: too many", 422, {"start_urls": os.urandom(5000).hex()}))
    cookie = _cookie(response)
    assert len(cookie) < 4000
    assert flashes.take(_request(cookie), {"csrf": "c"}) == Flash("options.start_urls: too many", 422, None)


@pytest.mark.timeout(10)
def test_a_flash_read_from_json_is_checked():
    assert Flash.from_json({"message": "ok", "status": 999}) == Flash("ok", 200)
    assert Flash.from_json({"status": 422}) is None and Flash.from_json("x") is None
    assert Flash.from_json({"message": "no", "status": 409, "form": {"a": 1}}) == Flash("no", 409, {"a": "1"})

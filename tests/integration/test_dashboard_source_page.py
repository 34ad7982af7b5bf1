"""The dashboard's page of one source, against a real serve in both modes (embedded, and a fleet with real
workers, beat, Redis, `chroma run` and PostgreSQL): its settings as written, runs with trigger, duration
and counters, failed and skipped documents with reasons, and its actions (sync now, retry failed, pause,
resume, edit, delete keeping or deleting chunks). Every form post answers 303 with a flash, so a reload
never posts again; a refusal lands on a 4xx page saying what was wrong and that nothing was changed.
HEADWATER_FOLDER_ROOTS is left unset: the default (the directory serve was started in) applies."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from tests.integration.fleet_harness import TEST_TIMING, FleetProcesses
from tests.integration.http_harness import TOKEN, ServeProcess
from tests.integration.postgres import postgres_database
from tests.integration.test_http_embedded import write_docs
from tests.services import chroma_server, redis_server, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def embedded_serve(tmp_path):
    server = ServeProcess(tmp_path, {"HEADWATER_CHROMA_PATH": str(tmp_path / "chroma"),
                                     "HEADWATER_CONFIG_FILE": str(tmp_path / "none.toml")})
    with server:
        server.work = server.outside = tmp_path
        yield server


@pytest.fixture
def fleet_serve(tmp_path):
    work = tmp_path / "serve"
    work.mkdir()
    with postgres_database() as database, redis_server(tmp_path) as redis_url, chroma_server(tmp_path) as (host, port):
        fleet = FleetProcesses(redis_url, host, port, tmp_path, timing={**TEST_TIMING,
                                                                        "HEADWATER_BEAT_MAX_LOOP_INTERVAL_SECONDS": "1"})
        fleet.start_fleet()
        env = {k: v for k, v in fleet.env.items() if k.startswith("HEADWATER_")}
        env.update({"HEADWATER_DATABASE_URL": database, "HEADWATER_CONFIG_FILE": str(work / "none.toml")})
        server = ServeProcess(work, env)
        try:
            server.start()
            server.work, server.fleet = work, fleet
            yield server
        finally:
            server.stop()
            fleet.stop()


class Browser:
    """A logged-in dashboard session that posts forms as a browser does: the CSRF token, no redirects followed."""

    def __init__(self, serve: ServeProcess) -> None:
        self.client = httpx.Client(base_url=serve.url, timeout=60)
        assert self.client.post("/admin/login", data={"token": TOKEN}).status_code == 303
        self.csrf = re.search(r'name="csrf" value="([^"]+)"', self.client.get("/admin").text).group(1)

    def post(self, url: str, /, **form: str) -> str:
        """Post a form; every dashboard form answers 303. Returns where it leads."""
        answer = self.client.post(url, data={"csrf": self.csrf, **form})
        assert answer.status_code == 303, (url, answer.status_code, answer.text[:500])
        return answer.headers["location"]

    def get(self, path: str, **params: str) -> httpx.Response:
        return self.client.get(path, params=params)


def _run_id(location: str) -> str:
    assert location.startswith("/admin/runs/"), location
    return location.removeprefix("/admin/runs/")


def _refused(page: httpx.Response, status: int, *words: str) -> None:
    assert page.status_code == status, (page.status_code, page.text[:800])
    assert "Nothing was changed." in page.text
    for word in words:
        assert word in page.text.replace("&#39;", "'"), word
    assert "Traceback" not in page.text and "could not convert" not in page.text


def _operator_works_a_source_from_its_page(serve: ServeProcess) -> None:
    browser = Browser(serve)
    api = serve.api
    folder = write_docs(serve.work / "handbook", 3)  # latin1.md fails: not UTF-8
    (folder / "empty.md").write_bytes(b"")  # skipped: nothing to index

    # Added with an interval written as a person writes it; the first run's page shows the flash once.
    location = browser.post("/admin/sources", kind="folder", id="handbook", path=str(folder),
                            schedule_interval_seconds="2h")
    first = serve.wait_for_run(_run_id(location), 300)
    assert first["status"] == "complete_with_errors", first
    assert "Added handbook" in browser.get(location).text
    assert "Added handbook" not in browser.get(location).text  # a flash is shown once
    assert api.get("/api/v1/sources/handbook").json()["schedule_interval_seconds"] == 7200

    page = browser.get("/admin/sources/handbook")
    assert page.status_code == 200
    text = page.text
    assert 'id="source-kind">folder<' in text and str(folder) in text and "every 2h" in text
    assert 'value="2h"' in text  # the edit form: as written, never 7200.0
    assert re.search(r'id="source-collection"><code>headwater</code>', text)
    runs = text[text.index('id="source-runs"'):]
    assert first["id"][:12] in runs and 'data-field="trigger">manual<' in runs
    assert re.search(r'data-field="duration">[0-9.]+ s<', runs)
    assert 'data-counter="failed">1<' in runs and 'data-counter="skipped">1<' in runs
    failed = text[text.index('id="source-failed"'):text.index('id="source-skipped"')]
    assert "latin1.md" in failed and "UTF-8" in failed
    skipped = text[text.index('id="source-skipped"'):]
    assert "empty.md" in skipped and first["skip_reasons"]["empty.md"] in skipped
    assert 'id="pause-schedule"' in text and 'href="/admin/sources/handbook/delete"' in text
    if serve.api.get("/readyz").json()["mode"] == "embedded":
        wait_until(lambda: api.get("/api/v1/sources/handbook").json()["next_run_at"], 10, "the next run")
    next_run = api.get("/api/v1/sources/handbook").json()["next_run_at"]
    assert next_run and 7000 < next_run - time.time() <= 7200

    # A refused edit: words, not Python; nothing changed; the form as typed; a reload shows the plain page.
    before = api.get("/api/v1/sources/handbook").json()
    assert browser.post("/admin/sources/handbook", path=str(folder), schedule_interval_seconds="every hour") \
        == "/admin/sources/handbook"
    refused = browser.get("/admin/sources/handbook")
    _refused(refused, 422, "schedule_interval_seconds: ", "2h, 30m")
    assert 'value="every hour"' in refused.text
    assert api.get("/api/v1/sources/handbook").json() == before
    reloaded = browser.get("/admin/sources/handbook")
    assert reloaded.status_code == 200 and "Nothing was changed." not in reloaded.text

    # Edited: saved, and shown back as written.
    browser.post("/admin/sources/handbook", path=str(folder), schedule_interval_seconds="90m")
    assert "Saved handbook." in (saved := browser.get("/admin/sources/handbook")).text
    assert 'value="90m"' in saved.text and "every 90m" in saved.text
    assert api.get("/api/v1/sources/handbook").json()["schedule_interval_seconds"] == 5400

    # Pause, then resume at once: the resume starts a new period (from now), and pausing stops the schedule.
    time.sleep(3)  # the edit started a period; a resume must start another, seconds later
    browser.post("/admin/sources/handbook/schedule/pause")
    paused = api.get("/api/v1/sources/handbook").json()
    assert paused["schedule_paused_at"] and paused["next_run_at"] is None
    page = browser.get("/admin/sources/handbook").text
    assert "Paused the schedule" in page and 'id="schedule-paused"' in page and 'id="resume-schedule"' in page
    resumed_at = time.time()
    browser.post("/admin/sources/handbook/schedule/resume")
    wait_until(lambda: api.get("/api/v1/sources/handbook").json()["next_run_at"], 15, "the resumed schedule")
    resumed = api.get("/api/v1/sources/handbook").json()
    assert resumed["schedule_paused_at"] is None and resumed["next_run_at"] >= resumed_at + 5400 - 1, resumed
    assert browser.post("/admin/sources/handbook/schedule/resume") == "/admin/sources/handbook"
    assert "was not paused" in browser.get("/admin/sources/handbook").text

    # Retry failed: the fixed file is indexed by a retry run, and the counts say so at once (the overview
    # had just cached 3: counts computed before a run finished are stale whatever their age).
    (folder / "latin1.md").write_text("café au lait, now valid UTF-8\n", encoding="utf-8")
    assert re.search(r'data-source="handbook".*?<td class="num">3</td>', browser.get("/admin/fragments/live").text, re.S)
    retry = serve.wait_for_run(_run_id(browser.post("/admin/sources/handbook/retry")), 300)
    assert retry["status"] == "complete" and retry["trigger"] == "retry" and retry["indexed"] == 1, retry
    assert re.search(r'data-source="handbook".*?<td class="num">4</td>', browser.get("/admin/fragments/live").text, re.S)
    assert 'id="source-counts">4 documents' in browser.get("/admin/sources/handbook").text
    assert browser.post("/admin/sources/handbook/retry") == "/admin/sources/handbook"
    _refused(browser.get("/admin/sources/handbook"), 409, "no failed documents to retry")

    # Sync now.
    synced = serve.wait_for_run(_run_id(browser.post("/admin/sources/handbook/sync")), 300)
    assert synced["status"] == "complete" and synced["trigger"] == "manual", synced
    runs = browser.get("/admin/sources/handbook").text
    assert all(r[:12] in runs for r in (first["id"], retry["id"], synced["id"]))

    # Delete: a page says what happens to the chunks; no choice is a refusal; keep leaves them searchable.
    confirm = browser.get("/admin/sources/handbook/delete")
    assert confirm.status_code == 200 and 'id="delete-documents">4<' in confirm.text  # 3 notes and latin1.md
    assert 'value="keep"' in confirm.text and 'value="delete"' in confirm.text and "stay searchable" in confirm.text
    assert browser.post("/admin/sources/handbook/delete") == "/admin/sources/handbook/delete"
    _refused(browser.get("/admin/sources/handbook/delete"), 422, "kept or deleted")
    assert api.get("/api/v1/sources/handbook").status_code == 200
    assert browser.post("/admin/sources/handbook/delete", documents="keep") == "/admin"
    assert "its chunks stay in the collection" in browser.get("/admin").text
    assert api.get("/api/v1/sources/handbook").status_code == 404
    hits = api.get("/api/v1/search", params={"q": "rotating the Chroma token", "source_id": "handbook"}).json()
    assert hits and hits[0]["source_id"] == "handbook"

    # Delete with its chunks: a run removes them.
    other = write_docs(serve.work / "runbook", 2, bad=False)
    serve.wait_for_run(_run_id(browser.post("/admin/sources", kind="folder", id="runbook", path=str(other))), 300)
    purge = serve.wait_for_run(_run_id(browser.post("/admin/sources/runbook/delete", documents="delete")), 300)
    assert purge["status"] == "complete" and purge["deleted"] == 2, purge
    assert api.get("/api/v1/search", params={"q": "rotating the Chroma token", "source_id": "runbook"}).json() == []

    # Folders outside the directory serve started in are refused by default, naming the setting.
    outside = write_docs(serve.outside.parent / f"{serve.outside.name}-elsewhere", 1, bad=False)
    assert browser.post("/admin/sources", kind="folder", id="elsewhere", path=str(outside)) \
        == "/admin/sources/new?kind=folder"
    _refused(browser.get("/admin/sources/new?kind=folder"), 422, "options.path: is outside", "HEADWATER_FOLDER_ROOTS")
    assert api.get("/api/v1/sources/elsewhere").status_code == 404

    # Pages for what is not there say so in words (HTML, not JSON).
    missing = browser.get("/admin/sources/nope")
    assert missing.status_code == 404 and "There is no source nope." in missing.text and "<html" in missing.text
    assert browser.post("/admin/sources/nope/sync") == "/admin"
    _refused(browser.get("/admin"), 404, "There is no source nope")
    bad_query = browser.get("/admin/search", q="x", k="many")
    assert bad_query.status_code == 422 and "valid integer" in bad_query.text and "<html" in bad_query.text
    browser.client.close()


@pytest.mark.timeout(900)
def test_an_operator_works_a_source_from_its_page_in_embedded_serve(embedded_serve):
    _operator_works_a_source_from_its_page(embedded_serve)


@pytest.mark.timeout(900)
def test_an_operator_works_a_source_from_its_page_in_fleet_serve(fleet_serve):
    fleet_serve.outside = fleet_serve.work
    _operator_works_a_source_from_its_page(fleet_serve)
    # The flashes lived in the fleet's Redis (every serve replica reads them), and each was read once.
    assert not fleet_serve.fleet.redis.keys("headwater:flash:*")

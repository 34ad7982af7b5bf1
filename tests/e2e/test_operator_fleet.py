"""The operator's jobs, end to end in Debian's chromium against a running fleet on loopback: a private
redis-server, `chroma run`, two workers and beat, and `headwater serve`; beside them an S3 endpoint (moto),
a private git server over HTTP and a website.

(a) add a source of each kind with a schedule from the dashboard, and see the next run beat will act on,
    the same after serve and beat restart; (b) break documents, see why they failed, fix them and retry;
(c) SIGKILL a worker mid-run: it shows offline with when it was last seen, the run page says which steps
    it held and when they run again, and the run completes with every document; (d) cancel a run and see
    how far it really got; (e) edit, pause, resume and delete a source from its page, beat's schedule
    following each change.

The tests share one fleet (starting one costs tens of seconds) and each uses sources of its own; they run
in file order ((c) restarts a worker that (d) then uses).
"""

from __future__ import annotations

import json
import re
import time
from calendar import timegm
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import boto3
import pytest

from headwater.fleet.crash import HOLD, CrashPoints
from tests.documents import write_docx
from tests.e2e import test_dashboard
from tests.git_http import private_git_server
from tests.git_repos import Repository
from tests.integration.fleet_harness import TEST_TIMING, FleetProcesses
from tests.integration.http_harness import TOKEN, ServeProcess
from tests.integration.test_http_embedded import write_docs
from tests.services import aws_test_credentials, chroma_server, moto_server, redis_server, wait_until
from tests.web_site import Site, serve as serve_site

pytestmark = pytest.mark.integration
page = test_dashboard.page  # Debian's chromium through Playwright
shot = test_dashboard.shot

GIT_TOKEN = "ghp_OperatorFleetToken0123456789abcd"
# The harness's fast liveness, and a beat that looks at its schedule every second (as the HTTP fleet tests).
TIMING = {**TEST_TIMING, "HEADWATER_BEAT_MAX_LOOP_INTERVAL_SECONDS": "1"}
WORKERS = ("worker-a", "worker-b")
SHOWN_UTC = "%Y-%m-%d %H:%M:%S UTC"  # how the dashboard writes a time in full (its title attribute)
HELD_POINT = "fetch.after_payload"  # inside a fetch step: its lease is held (and renewed) while it waits there


@dataclass
class World:
    serve: ServeProcess
    fleet: FleetProcesses
    crash: CrashPoints
    work: Path
    repo: Repository
    git_url: str
    site: Site
    s3_endpoint: str


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    work = tmp_path_factory.mktemp("operator")
    repo = Repository(work / "remotes", "runbook")
    repo.write("oncall.md", "# On call\n\nHand the pager over at nine with a written summary of open incidents.\n")
    repo.write("deploy/rollback.md", "# Rollback\n\nRoll back by redeploying the previous image tag.\n")
    repo.commit_and_push("first")
    site = Site()
    site.page("/", "<html><head><title>Widgets</title></head><body><main><h1>Widgets</h1><p>Every widget is "
                   "inspected twice before it leaves the factory floor.</p><a href='/care.html'>Care</a></main>"
                   "</body></html>")
    site.page("/care.html", "<html><head><title>Care</title></head><body><main><h1>Care</h1><p>Oil the widget "
                            "hinge once a month and keep it out of direct sunlight.</p></main></body></html>")
    with aws_test_credentials(), redis_server(work) as redis_url, chroma_server(work) as (host, port), \
            moto_server(work) as s3_endpoint, private_git_server(work / "remotes", GIT_TOKEN) as (git_base, _), \
            serve_site(site):
        s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
        s3.create_bucket(Bucket="reports")
        s3.put_object(Bucket="reports", Key="q1/summary.md", Body=b"# Q1\n\nRevenue grew in the northern region.\n")
        s3.put_object(Bucket="reports", Key="q1/risks.md", Body=b"# Risks\n\nOne supplier ships every part.\n")
        fleet = FleetProcesses(redis_url, host, port, work, timing=TIMING)
        fleet.env.update({"OPERATOR_GIT_TOKEN": GIT_TOKEN, "HEADWATER_GIT_CACHE_DIR": str(work / "git-cache")})
        env = {k: v for k, v in fleet.env.items() if k.startswith("HEADWATER_")}
        env.update({"HEADWATER_FOLDER_ROOTS": json.dumps([str(work)]), "HEADWATER_CONFIG_FILE": str(work / "none.toml"),
                    "HEADWATER_CHROMA_PATH": str(work / "local"), "HEADWATER_SESSION_COOKIE_SECURE": "true",
                    "HEADWATER_GIT_CACHE_DIR": str(work / "serve-git-cache"), "OPERATOR_GIT_TOKEN": GIT_TOKEN})
        serve = ServeProcess(work, env)
        try:
            for name in WORKERS:
                fleet.start_worker(name, fleet_name=name)
            fleet.start_beat()
            serve.start()
            yield World(serve, fleet, CrashPoints(fleet.redis, enabled=True), work, repo, f"{git_base}/runbook.git",
                        site, s3_endpoint)
        finally:
            serve.stop()
            fleet.stop()


def log_in(page, world: World) -> None:
    from playwright.sync_api import expect

    page.goto(world.serve.url + "/admin/login")
    page.fill("#token", TOKEN)
    page.keyboard.press("Enter")
    expect(page).to_have_url(world.serve.url + "/admin")


def add_source(page, world: World, kind: str, source_id: str, fields: dict[str, str | bool]) -> str:
    """Fill the add form of `kind` and submit it; returns the first run's page URL (where the form leads)."""
    from playwright.sync_api import expect

    page.goto(world.serve.url + f"/admin/sources/new?kind={kind}")
    page.fill("#f-id", source_id)
    for field, value in fields.items():
        if value is True:
            page.check(f"#f-{field}")
        else:
            page.fill(f"#f-{field}", value)
    page.click("#source-form button[type=submit]")
    page.wait_for_url("**/admin/runs/**")
    expect(page.locator(".notice")).to_contain_text(f"Added {source_id}")
    return page.url


def documents(world: World, source_id: str) -> set[str]:
    found = world.serve.api.get(f"/api/v1/sources/{source_id}/documents", params={"limit": 1000})
    return {d["uri"] for d in found.raise_for_status().json()["documents"]}


def runs_of(world: World, source_id: str) -> list[dict]:
    return world.serve.api.get("/api/v1/runs", params={"source_id": source_id}).raise_for_status().json()


def shown_time(text: str) -> float:
    return float(timegm(time.strptime(text, SHOWN_UTC)))


# (a) schedules ------------------------------------------------------------------------------------


def beat_score(world: World, source_id: str) -> float:
    """The score of the source's entry in redbeat's sorted set: when beat looks at it next (beat's own truth)."""
    from redbeat.schedulers import ensure_conf

    from schedules.source_schedules import _key
    from workers.celery_app import create_app

    app = create_app(world.fleet.settings("headwater"))
    score = world.fleet.redis.zscore(ensure_conf(app).schedule_key, _key(app, source_id))
    assert score is not None, f"{source_id} has no entry in beat's schedule"
    return float(score)


def beat_ticked_since(world: World, since: float) -> bool:
    """Whether beat has fired its sweeper (every second) since `since`: a running beat, not one starting."""
    from redbeat import RedBeatSchedulerEntry
    from redbeat.schedulers import ensure_conf

    from workers.celery_app import create_app

    app = create_app(world.fleet.settings("headwater"))
    try:
        entry = RedBeatSchedulerEntry.from_key(ensure_conf(app).key_prefix + "sweep-fleet-leases", app=app)
    except KeyError:
        return False
    return entry.last_run_at is not None and entry.last_run_at.timestamp() > since


def next_daily(hour: int, minute: int) -> float:
    now = datetime.now(timezone.utc)
    at = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    return (at if at > now else at + timedelta(days=1)).timestamp()


def next_runs_on_the_overview(page, world: World, source_ids: list[str]) -> dict[str, tuple[float, str]]:
    """(the next run in full from its title, the words shown) of each source, from one load of the overview."""
    page.goto(world.serve.url + "/admin")
    found = {}
    for source_id in source_ids:
        cell = page.locator(f"#sources tr[data-source='{source_id}'] td.next-run span")
        found[source_id] = (shown_time(cell.get_attribute("title")), cell.inner_text())
    return found


@pytest.mark.timeout(420)
def test_a_source_of_each_kind_with_a_schedule_shows_the_next_run_beat_acts_on_across_restarts(world, page, tmp_path):
    from playwright.sync_api import expect

    log_in(page, world)
    folder = write_docs(world.work / "handbook", 3, bad=False)
    hour = (datetime.now(timezone.utc).hour + 6) % 24  # daily cron lines far from now: never due during the test
    crons = {"reports": (hour, 17), "widgets": ((hour + 3) % 24, 45)}
    intervals = {"handbook": 3600.0, "runbook": 7200.0}
    added: dict[str, tuple[float, float]] = {}  # before the form was filled, after it was stored
    forms = {
        "handbook": ("folder", {"path": str(folder), "interval": "3600"}),
        "reports": ("s3", {"bucket": "reports", "prefix": "q1", "endpoint_url": world.s3_endpoint,
                           "cron": "17 {} * * *".format(crons["reports"][0])}),
        "runbook": ("git", {"url": world.git_url, "branch": "main", "token_env": "OPERATOR_GIT_TOKEN",
                            "interval": "7200"}),
        "widgets": ("web", {"start_urls": world.site.url("/"), "allow_private_addresses": True, "delay_seconds": "0",
                            "cron": "45 {} * * *".format(crons["widgets"][0])}),
    }
    first_runs = {}
    for source_id, (kind, fields) in forms.items():
        before = time.time()
        first_runs[source_id] = add_source(page, world, kind, source_id, fields)
        added[source_id] = (before, time.time())
    for source_id, run_url in first_runs.items():
        page.goto(run_url)
        expect(page.locator("#run-status")).to_have_text("complete", timeout=240_000)
    assert documents(world, "handbook") == {"note-000.md", "note-001.md", "note-002.md"}
    assert documents(world, "reports") == {"q1/summary.md", "q1/risks.md"}
    assert documents(world, "runbook") == {"oncall.md", "deploy/rollback.md"}
    assert documents(world, "widgets") == {world.site.url("/"), world.site.url("/care.html")}

    ids = list(forms)
    seen = next_runs_on_the_overview(page, world, ids)
    shot(page, tmp_path, "a-next-runs")
    for source_id, (at, words) in seen.items():
        # Beat looks at an entry when its score is due and fires it then or within the second after
        # (redbeat keeps whole seconds): what the dashboard shows is when beat will act.
        score = beat_score(world, source_id)
        assert 0 <= at - score <= 1, (source_id, at, score)
        assert words.startswith("in "), (source_id, words)
    for source_id, interval in intervals.items():  # the first period starts when the source was added
        before, after = added[source_id]
        assert before - 1 <= seen[source_id][0] - interval <= after + 1, (source_id, seen[source_id], added[source_id])
    for source_id, (hour_, minute) in crons.items():  # a cron line's minute exactly, not a second before
        assert seen[source_id][0] == next_daily(hour_, minute), (source_id, seen[source_id])

    # A redeployed serve saves every schedule again: the next runs must not move. (Compared in full: the
    # words, "in 59 min", move on with the clock.)
    seen = {source_id: at for source_id, (at, _) in seen.items()}
    world.serve.restart()
    assert {s: at for s, (at, _) in next_runs_on_the_overview(page, world, ids).items()} == seen
    assert all(0 <= seen[s] - beat_score(world, s) <= 1 for s in ids)

    # Nor when beat restarts: it takes the schedule from Redis and acts on the same times.
    world.fleet.stop_one("beat")
    restarted_at = time.time()
    world.fleet.start_beat()
    wait_until(lambda: beat_ticked_since(world, restarted_at), 60, "the restarted beat's first ticks")
    assert {s: at for s, (at, _) in next_runs_on_the_overview(page, world, ids).items()} == seen
    # Nothing fired meanwhile: each source still has only the run its form started.
    assert {s: len(runs_of(world, s)) for s in ids} == {s: 1 for s in ids}
    shot(page, tmp_path, "a-next-runs-after-restarts")


# (b) broken documents -------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_broken_documents_show_why_they_failed_and_index_once_fixed_and_retried(world, page, tmp_path):
    from playwright.sync_api import expect

    log_in(page, world)
    folder = write_docs(world.work / "broken", 3, bad=False)
    locked = folder / "locked.md"
    locked.write_text("# Locked\n\nOnly the owner may read this page about badge access.\n")
    locked.chmod(0)  # the workers run without root's DAC capabilities: they obey file permissions
    corrupt = folder / "contract.docx"
    corrupt.write_bytes(b"PK\x03\x04 this was cut short in the middle of an upload")
    garbled = folder / "latin1.md"
    garbled.write_bytes(b"caf\xe9 au lait, not UTF-8\n")
    try:
        run_url = add_source(page, world, "folder", "broken", {"path": str(folder)})
        expect(page.locator("#run-status")).to_have_text("complete with errors", timeout=240_000)
        failed = page.locator("#failed")
        expect(failed.locator("tbody tr")).to_have_count(3)
        reasons = {row.locator("td").nth(0).inner_text(): row.locator("td").nth(1).inner_text()
                   for row in failed.locator("tbody tr").all()}
        assert set(reasons) == {"locked.md", "contract.docx", "latin1.md"}
        assert "ermission" in reasons["locked.md"], reasons  # the reason says what is wrong, per document
        assert "not valid UTF-8" in reasons["latin1.md"], reasons
        assert "could not be parsed as DOCX" in reasons["contract.docx"] and "corrupt" in reasons["contract.docx"], reasons
        expect(page.locator("#run .sub").first).to_have_text("6 / 6 documents")
        shot(page, tmp_path, "b-failed-with-reasons")
    finally:
        locked.chmod(0o644)
    write_docx(corrupt)
    garbled.write_text("café au lait, now valid UTF-8\n", encoding="utf-8")
    page.click("#retry")
    page.wait_for_url(lambda url: url != run_url and "/admin/runs/" in url)
    expect(page.locator(".notice")).to_contain_text("Retrying the failed documents")
    expect(page.locator("#run-status")).to_have_text("complete", timeout=240_000)
    expect(page.locator("#run [data-counter=indexed]")).to_have_text("3")
    expect(page.locator("#run")).to_contain_text("None")  # no failed documents
    assert documents(world, "broken") == {"note-000.md", "note-001.md", "note-002.md", "locked.md",
                                          "contract.docx", "latin1.md"}
    shot(page, tmp_path, "b-retried")


# (c) a worker lost mid-run ------------------------------------------------------------------------------


def worker_running(world: World, uri: str) -> str | None:
    """The fleet name of the worker whose current steps include `uri`."""
    for worker in world.serve.api.get("/api/v1/workers").raise_for_status().json():
        if any(step.get("document") == uri for step in worker["current_steps"]):
            return worker["name"]
    return None


@pytest.mark.timeout(300)
def test_a_worker_killed_mid_run_shows_offline_its_steps_are_redriven_and_the_run_completes(world, page, tmp_path):
    from playwright.sync_api import expect

    log_in(page, world)
    folder = write_docs(world.work / "lost", 10, bad=False)
    held_uri = "note-004.md"
    world.crash.arm(HELD_POINT, uri=held_uri, action=HOLD)
    run_url = add_source(page, world, "folder", "lost", {"path": str(folder)})
    wait_until(lambda: world.crash.held(HELD_POINT) >= 1 and worker_running(world, held_uri), 120,
               f"a worker holding the fetch of {held_uri}")
    victim = worker_running(world, held_uri)
    handle = victim.split("@")[0]
    assert handle in WORKERS

    # Beat is frozen while the page is read: with the harness's 1 s sweeps, the window between the lost
    # lease's expiry and its re-drive is too short to look at reliably (4 s leases, as in production's 15 s
    # with 5 s sweeps, it is what the operator sees for a few seconds).
    world.fleet.pause("beat")
    try:
        killed_at = time.time()
        world.fleet.kill(handle)
        page.goto(run_url)
        stalled = page.locator("#stalled")
        expect(stalled).to_contain_text("1 step held by a lost worker", timeout=30_000)
        expect(stalled).to_contain_text(f"fetch {held_uri}")
        redrive_by = shown_time(re.search(r"by (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC)", stalled.inner_text()).group(1))
        assert killed_at <= redrive_by <= killed_at + 15, (killed_at, redrive_by)
        expect(page.locator("#run-status")).to_have_text("running")
        shot(page, tmp_path, "c-held-by-a-lost-worker")

        page.goto(world.serve.url + "/admin")
        row = page.locator(f"#workers tr[data-worker='{victim}']")
        expect(row).to_contain_text("offline", timeout=45_000)
        expect(row).to_contain_text("last seen")
        assert re.search(r"last seen \d+ s ago", row.inner_text()), row.inner_text()
        expect(row.locator("td.running")).to_have_text("—")  # not what it was running when it went
        shot(page, tmp_path, "c-worker-offline")
    finally:
        world.fleet.resume("beat")

    page.goto(run_url)
    expect(page.locator("#run-status")).to_have_text("complete", timeout=120_000)
    expect(page.locator("#stalled")).to_have_count(0)
    expect(page.locator("#run .sub").first).to_have_text("10 / 10 documents")
    assert documents(world, "lost") == {f"note-{i:03}.md" for i in range(10)}
    shot(page, tmp_path, "c-run-complete")

    # The worker comes back under its name (a restarted pod): online, and not running its predecessor's step.
    world.fleet.start_worker(handle, fleet_name=handle)
    page.goto(world.serve.url + "/admin")
    row = page.locator(f"#workers tr[data-worker='{victim}']")
    expect(row).to_contain_text("online", timeout=90_000)
    expect(row.locator("td.running")).not_to_contain_text(held_uri)


# (d) cancel -----------------------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_a_cancelled_run_shows_how_far_it_got(world, page, tmp_path):
    from playwright.sync_api import expect

    log_in(page, world)
    folder = write_docs(world.work / "cancelled", 12, bad=False)
    world.crash.arm(HELD_POINT, uri="note-011.md", action=HOLD)  # the run cannot finish before it is cancelled
    try:
        add_source(page, world, "folder", "cancelled", {"path": str(folder)})
        run_url = page.url
        run_id = run_url.split("/admin/runs/")[1].split("?")[0]
        wait_until(lambda: world.crash.held(HELD_POINT) >= 1, 120, "the run's last document held")
        wait_until(lambda: world.serve.api.get(f"/api/v1/runs/{run_id}").json()["indexed"] >= 4, 120,
                   "some documents indexed")
        expect(page.locator("#run-status")).to_have_text("running")
        page.click("#run button.danger")  # Cancel run
        expect(page.locator(".notice")).to_contain_text("Cancelled")
        expect(page.locator("#run-status")).to_have_text("cancelled")
    finally:
        world.crash.release(HELD_POINT)
    run = world.serve.api.get(f"/api/v1/runs/{run_id}").raise_for_status().json()
    done = run["indexed"] + run["skipped"] + run["failed"]
    assert 4 <= done < 12 and run["progress"] == {"done": done, "total": 12}, run
    expect(page.locator("#run .sub").first).to_have_text(f"{done} / 12 documents")
    width = page.locator("#run .progress .bar").evaluate("bar => bar.style.width")
    assert width == f"{round(100 * done / 12)}%", width
    shot(page, tmp_path, "d-cancelled")


# (e) edit, pause and delete -------------------------------------------------------------------------


def run_id_of(url: str) -> str:
    return url.split("/admin/runs/")[1].split("?")[0]


def beat_due(world: World, source_id: str) -> float | None:
    try:
        return beat_score(world, source_id)
    except AssertionError:
        return None


def test_a_source_is_edited_paused_resumed_and_deleted_from_its_page(world, page, tmp_path):
    from playwright.sync_api import expect

    log_in(page, world)
    kept_folder = write_docs(world.work / "playbook", 2, bad=False)
    run_url = add_source(page, world, "folder", "playbook", {"path": str(kept_folder), "interval": "2h"})
    assert world.serve.wait_for_run(run_id_of(run_url), 240)["status"] == "complete"
    source_page = world.serve.url + "/admin/sources/playbook"

    # A refused edit changes nothing, here or in beat; a good one moves beat's next run with it.
    page.goto(source_page)
    expect(page.locator("#source-schedule")).to_contain_text("every 2h")
    due_before = beat_score(world, "playbook")
    page.fill("#f-interval", "every hour")
    page.click("#source-form button[type=submit]")
    expect(page.locator("#unchanged")).to_have_text("Nothing was changed.")
    assert beat_score(world, "playbook") == due_before
    page.goto(source_page)
    page.fill("#f-interval", "30m")
    saved_at = time.time()
    page.click("#source-form button[type=submit]")
    expect(page.locator(".notice")).to_have_text("Saved playbook.")
    assert world.serve.api.get("/api/v1/sources/playbook").json()["schedule_interval_seconds"] == 1800
    wait_until(lambda: abs(beat_score(world, "playbook") - (saved_at + 1800)) < 5, 30, "beat's entry to follow the edit")

    # Pause: beat has nothing to fire; resume: a new period from now.
    page.click("#pause-schedule button")
    expect(page.locator(".notice")).to_contain_text("Paused the schedule of playbook")
    expect(page.locator("#source-next-run")).to_have_text("none while paused")
    wait_until(lambda: beat_due(world, "playbook") is None, 30, "beat's entry to go while paused")
    page.reload()
    expect(page.locator(".notice")).to_have_count(0)  # the reload posted nothing
    resumed_at = time.time()
    page.click("#resume-schedule button")
    expect(page.locator(".notice")).to_contain_text("Resumed the schedule of playbook")
    wait_until(lambda: abs((beat_due(world, "playbook") or 0) - (resumed_at + 1800)) < 5, 30,
               "beat's entry to come back for a new period")
    shot(page, tmp_path, "e-resumed")

    # Delete keeping the chunks: the source and its schedule go, its documents stay searchable.
    page.click("#delete-source")
    expect(page).to_have_url(source_page + "/delete")
    expect(page.locator("#delete-documents")).to_have_text("2")
    page.click("#delete-keep")
    expect(page.locator(".notice")).to_contain_text("its chunks stay in the collection")
    assert world.serve.api.get("/api/v1/sources/playbook").status_code == 404
    wait_until(lambda: beat_due(world, "playbook") is None, 30, "the deleted source's beat entry to go")
    assert world.serve.api.get("/api/v1/search", params={"q": "rotating the Chroma token",
                                                         "source_id": "playbook"}).json()

    # Delete deleting the chunks: a run of the fleet removes them.
    purged_folder = write_docs(world.work / "purged", 2, bad=False)
    world.serve.wait_for_run(run_id_of(add_source(page, world, "folder", "purged", {"path": str(purged_folder)})), 240)
    page.goto(world.serve.url + "/admin/sources/purged/delete")
    page.click("#delete-chunks-button")
    page.wait_for_url("**/admin/runs/**")
    expect(page.locator(".notice")).to_contain_text("this run removes its chunks")
    assert world.serve.wait_for_run(run_id_of(page.url), 240)["deleted"] == 2
    assert world.serve.api.get("/api/v1/search", params={"q": "rotating the Chroma token",
                                                         "source_id": "purged"}).json() == []

"""A source's page in headless Chromium (Debian's, through Playwright) against an embedded serve: an
operator edits a source (a refused edit first), pauses and resumes its schedule, retries its failed
document, syncs it now, and deletes sources keeping and deleting their chunks. After every post a
reload of the page shows it again without posting anything a second time."""

from __future__ import annotations

import pytest

from tests.e2e import test_dashboard
from tests.integration.http_harness import TOKEN, ServeProcess
from tests.integration.test_http_embedded import write_docs

pytestmark = pytest.mark.integration
page = test_dashboard.page  # the browser fixture: Debian's chromium through Playwright
shot = test_dashboard.shot


@pytest.fixture
def embedded_app(tmp_path):
    # HEADWATER_FOLDER_ROOTS unset: folders under the directory serve started in (tmp_path) are allowed.
    server = ServeProcess(tmp_path, {"HEADWATER_CHROMA_PATH": str(tmp_path / "chroma"),
                                     "HEADWATER_CONFIG_FILE": str(tmp_path / "none.toml"),
                                     "HEADWATER_SESSION_COOKIE_SECURE": "true"})
    with server:
        yield server


def _runs(app, source_id: str) -> int:
    return len(app.api.get("/api/v1/runs", params={"source_id": source_id}).json())


def _finished(app, page) -> dict:
    """The run whose page is open, once finished (the page refreshes itself meanwhile)."""
    return app.wait_for_run(page.url.rsplit("/", 1)[1], 240)


@pytest.mark.timeout(600)
def test_operator_edits_pauses_retries_syncs_and_deletes_from_the_source_page(embedded_app, page, tmp_path):
    from playwright.sync_api import expect

    app = embedded_app
    folder = write_docs(tmp_path / "handbook", 3)  # latin1.md fails
    page.goto(app.url + "/admin/login")
    page.fill("#token", TOKEN)
    page.keyboard.press("Enter")
    expect(page).to_have_url(app.url + "/admin")

    page.goto(app.url + "/admin/sources/new?kind=folder")
    page.fill("#f-id", "handbook")
    page.fill("#f-path", str(folder))
    page.fill("#f-interval", "2h")
    page.click("#source-form button[type=submit]")
    page.wait_for_url("**/admin/runs/**")
    expect(page.locator(".notice")).to_contain_text("Added handbook")
    assert _finished(app, page)["status"] == "complete_with_errors"

    page.goto(app.url + "/admin/sources/handbook")
    expect(page.locator("#source-kind")).to_have_text("folder")
    expect(page.locator("#source-location")).to_have_text(str(folder))
    expect(page.locator("#source-schedule")).to_contain_text("every 2h")
    expect(page.locator("#source-next-run")).to_contain_text("in ")
    expect(page.locator("#f-interval")).to_have_value("2h")
    expect(page.locator("#source-runs [data-field=trigger]").first).to_have_text("manual")
    expect(page.locator("#source-failed")).to_contain_text("latin1.md")
    shot(page, tmp_path, "source-page")

    # A refused edit: what was wrong in words, nothing changed, what was typed kept; a reload posts nothing.
    page.fill("#f-interval", "every hour")
    page.click("#source-form button[type=submit]")
    expect(page.locator(".error")).to_contain_text("schedule_interval_seconds: ")
    expect(page.locator("#unchanged")).to_have_text("Nothing was changed.")
    expect(page.locator("#f-interval")).to_have_value("every hour")
    shot(page, tmp_path, "source-edit-refused")
    page.reload()
    expect(page.locator(".error")).to_have_count(0)
    expect(page.locator("#f-interval")).to_have_value("2h")
    page.fill("#f-interval", "30m")
    page.click("#source-form button[type=submit]")
    expect(page.locator(".notice")).to_have_text("Saved handbook.")
    expect(page.locator("#f-interval")).to_have_value("30m")
    assert app.api.get("/api/v1/sources/handbook").json()["schedule_interval_seconds"] == 1800

    # Pause and resume.
    page.click("#pause-schedule button")
    expect(page.locator(".notice")).to_contain_text("Paused the schedule of handbook")
    expect(page.locator("#schedule-paused")).to_be_visible()
    expect(page.locator("#source-next-run")).to_have_text("none while paused")
    page.reload()
    expect(page.locator(".notice")).to_have_count(0)
    assert app.api.get("/api/v1/sources/handbook").json()["schedule_paused_at"]
    page.click("#resume-schedule button")
    expect(page.locator(".notice")).to_contain_text("Resumed the schedule of handbook")
    expect(page.locator("#pause-schedule")).to_be_visible()
    assert app.api.get("/api/v1/sources/handbook").json()["schedule_paused_at"] is None

    # Retry the failed document once the file is fixed.
    (folder / "latin1.md").write_text("café au lait, now valid UTF-8\n", encoding="utf-8")
    page.click("#retry-source button")
    page.wait_for_url("**/admin/runs/**")
    expect(page.locator(".notice")).to_have_text("Retrying the failed documents.")
    retry = _finished(app, page)
    assert retry["trigger"] == "retry" and retry["indexed"] == 1

    # Sync now; a reload of the run page it led to starts nothing.
    page.goto(app.url + "/admin/sources/handbook")
    expect(page.locator("#retry-source")).to_have_count(0)
    before = _runs(app, "handbook")
    page.click("#sync-source button")
    page.wait_for_url("**/admin/runs/**")
    expect(page.locator("#run-status")).to_have_text("complete", timeout=240_000)
    page.reload()
    expect(page.locator("#run-status")).to_have_text("complete")
    assert _runs(app, "handbook") == before + 1

    # Delete, keeping the chunks: the page says what each choice does.
    page.goto(app.url + "/admin/sources/handbook")
    page.click("#delete-source")
    expect(page).to_have_url(app.url + "/admin/sources/handbook/delete")
    expect(page.locator("#delete-documents")).to_have_text("4")
    expect(page.locator("#delete-form")).to_contain_text("stay searchable")
    shot(page, tmp_path, "source-delete-confirm")
    page.click("#delete-keep")
    expect(page).to_have_url(app.url + "/admin")
    expect(page.locator(".notice")).to_contain_text("its chunks stay in the collection")
    expect(page.locator("#sources tr[data-source=handbook]")).to_have_count(0)
    assert app.api.get("/api/v1/search", params={"q": "rotating the Chroma token", "source_id": "handbook"}).json()

    # Delete, deleting the chunks: a run removes them.
    other = write_docs(tmp_path / "runbook", 2, bad=False)
    page.goto(app.url + "/admin/sources/new?kind=folder")
    page.fill("#f-id", "runbook")
    page.fill("#f-path", str(other))
    page.click("#source-form button[type=submit]")
    page.wait_for_url("**/admin/runs/**")
    _finished(app, page)
    page.goto(app.url + "/admin/sources/runbook/delete")
    page.click("#delete-chunks-button")
    page.wait_for_url("**/admin/runs/**")
    expect(page.locator(".notice")).to_contain_text("this run removes its chunks")
    assert _finished(app, page)["deleted"] == 2
    page.reload()
    expect(page.locator(".notice")).to_have_count(0)
    assert app.api.get("/api/v1/search", params={"q": "rotating the Chroma token", "source_id": "runbook"}).json() == []

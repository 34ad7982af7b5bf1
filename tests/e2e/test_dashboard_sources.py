"""Sources of other kinds than folders in the dashboard, in headless Chromium against an embedded serve:
an operator adds a git source and a web source with their own fields, sees the first syncs finish,
corrects a refused form, edits both and deletes both."""

from __future__ import annotations

import json

import pytest

from tests.e2e import test_dashboard
from tests.git_repos import Repository
from tests.integration.http_harness import TOKEN, ServeProcess
from tests.web_site import Site, serve as serve_site

pytestmark = pytest.mark.integration
page = test_dashboard.page  # the browser fixture: Debian's chromium through Playwright
shot = test_dashboard.shot


@pytest.fixture
def embedded_app(tmp_path):
    repo = Repository(tmp_path / "remotes", "runbook")
    repo.write("oncall.md", "# On call\n\nHand the pager over at nine with a written summary.\n")
    repo.commit_and_push("first")
    site = Site()
    site.page("/", "<html><head><title>Widgets</title></head><body><main><h1>Widgets</h1><p>Every widget is "
                   "inspected twice before it leaves the factory floor.</p></main></body></html>")
    with serve_site(site):
        server = ServeProcess(tmp_path, {"HEADWATER_CHROMA_PATH": str(tmp_path / "chroma"),
                                         "HEADWATER_CONFIG_FILE": str(tmp_path / "none.toml"),
                                         "HEADWATER_FOLDER_ROOTS": json.dumps([str(tmp_path)]),
                                         "HEADWATER_GIT_CACHE_DIR": str(tmp_path / "git-cache"),
                                         "HEADWATER_SESSION_COOKIE_SECURE": "true"})
        with server:
            server.repo, server.site = repo, site
            yield server


def _stored(app, source_id: str) -> dict | None:
    found = app.api.get(f"/api/v1/sources/{source_id}")
    return found.json() if found.status_code == 200 else None


@pytest.mark.timeout(600)
def test_operator_adds_edits_and_deletes_a_git_and_a_web_source(embedded_app, page, tmp_path):
    from playwright.sync_api import expect

    app = embedded_app
    page.goto(app.url + "/admin/login")
    page.fill("#token", TOKEN)
    page.keyboard.press("Enter")
    expect(page).to_have_url(app.url + "/admin")

    # A git source: the overview links to its form, which asks for what a git source needs.
    page.click("a[href='/admin/sources/new?kind=git']")
    expect(page).to_have_url(app.url + "/admin/sources/new?kind=git")
    expect(page.locator("#f-token_env")).to_be_visible()
    expect(page.locator("#f-path")).to_have_count(0)
    page.fill("#f-id", "runbook")
    page.fill("#f-url", app.repo.url)
    page.fill("#f-branch", "no..such")
    page.click("#source-form button[type=submit]")
    # Refused with the message the API gives, what was typed kept; a reload would not store it either.
    expect(page.locator(".error")).to_have_text("options.branch: 'no..such' is not a branch name")
    expect(page.locator("#f-url")).to_have_value(app.repo.url)
    assert _stored(app, "runbook") is None
    page.fill("#f-branch", "main")
    page.click("#source-form button[type=submit]")
    page.wait_for_url("**/admin/runs/**")
    expect(page.locator(".notice")).to_contain_text("Added runbook")
    expect(page.locator("#run-status")).to_have_text("complete", timeout=240_000)
    shot(page, tmp_path, "git-source-synced")

    # A web source: its own fields (start URLs, private addresses), none of git's.
    page.goto(app.url + "/admin/sources/new?kind=web")
    expect(page.locator("#f-url")).to_have_count(0)
    page.fill("#f-id", "widgets")
    page.fill("#f-start_urls", app.site.url("/"))
    page.check("#f-allow_private_addresses")
    page.fill("#f-delay_seconds", "0")
    page.click("#source-form button[type=submit]")
    page.wait_for_url("**/admin/runs/**")
    expect(page.locator("#run-status")).to_have_text("complete", timeout=240_000)
    web = _stored(app, "widgets")
    assert web["options"] == {"start_urls": [app.site.url("/")], "allow_private_addresses": True, "delay_seconds": 0.0}

    # Both listed on the overview with where they are; each opens its own page.
    page.goto(app.url + "/admin")
    expect(page.locator("#sources tr[data-source=runbook]")).to_contain_text(app.repo.url)
    expect(page.locator("#sources tr[data-source=widgets]")).to_contain_text(app.site.url("/"))
    page.click("#sources tr[data-source=runbook] a >> text=runbook")
    expect(page).to_have_url(app.url + "/admin/sources/runbook")
    expect(page.locator("#source-kind")).to_have_text("git")

    # Edit: the git source keeps its values in the form; a change is saved and shown.
    expect(page.locator("#f-url")).to_have_value(app.repo.url)
    page.fill("#f-max_file_kb", "64")
    page.click("#source-form button[type=submit]")
    expect(page.locator(".notice")).to_have_text("Saved runbook.")
    assert _stored(app, "runbook")["options"]["max_file_kb"] == 64
    expect(page.locator("#f-max_file_kb")).to_have_value("64")

    page.goto(app.url + "/admin/sources/widgets")
    expect(page.locator("#f-allow_private_addresses")).to_be_checked()
    page.fill("#f-max_pages", "not a number")
    page.click("#source-form button[type=submit]")
    expect(page.locator(".error")).to_contain_text("options.max_pages: ")
    assert _stored(app, "widgets")["options"] == web["options"]
    page.fill("#f-max_pages", "50")
    page.click("#source-form button[type=submit]")
    expect(page.locator(".notice")).to_have_text("Saved widgets.")
    assert _stored(app, "widgets")["options"]["max_pages"] == 50
    shot(page, tmp_path, "web-source-edited")

    # Delete both from their pages (through the page that asks what becomes of their chunks).
    for source_id in ("runbook", "widgets"):
        page.goto(app.url + f"/admin/sources/{source_id}")
        page.click("#delete-source")
        page.click("#delete-keep")
        expect(page.locator(".notice")).to_contain_text(f"Deleted {source_id}")
        assert _stored(app, source_id) is None
    expect(page.locator("#sources")).not_to_contain_text("runbook")

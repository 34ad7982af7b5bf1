"""The admin dashboard in headless Chromium (Debian's, through Playwright) against a running serve with
real workers: log in, add a folder source, watch its run finish with live progress, retry a failed
document, search. Screenshots are kept under the test's tmp dir (and SCREENSHOT_DIR when set).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from headwater.fleet.crash import HOLD, CrashPoints
from tests.integration.fleet_harness import TEST_TIMING, FleetProcesses
from tests.integration.http_harness import TOKEN, ServeProcess
from tests.integration.test_http_embedded import write_docs
from tests.services import chroma_server, redis_server

pytestmark = pytest.mark.integration
CHROMIUM = "/usr/bin/chromium"
# One read of the run panel's progress and status: the panel is replaced every 2 s, so two reads
# could see two different panels.
READ_RUN = "() => [document.querySelector('#run .sub').innerText, document.querySelector('#run-status').innerText]"
# The run is held on one document until the page has shown its progress move, so the live panel is
# seen mid-run however fast the other documents go.
HELD_POINT, HELD_URI = "fetch.after_commit", "note-012.md"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture
def fleet_app(tmp_path):
    with redis_server(tmp_path) as redis_url, chroma_server(tmp_path) as (host, port):
        fleet = FleetProcesses(redis_url, host, port, tmp_path, timing={**TEST_TIMING, "HEADWATER_RUN_WINDOW": "2"})
        fleet.start_fleet()
        env = {k: v for k, v in fleet.env.items() if k.startswith("HEADWATER_")}
        env.update({"HEADWATER_FOLDER_ROOTS": json.dumps([str(tmp_path)]), "HEADWATER_CONFIG_FILE": str(tmp_path / "none.toml"),
                    "HEADWATER_CHROMA_PATH": str(tmp_path / "local"),
                    # Chromium keeps a Secure cookie for http://127.0.0.1 (a trustworthy origin), so the
                    # dashboard is tested with the production cookie flags.
                    "HEADWATER_SESSION_COOKIE_SECURE": "true"})
        server = ServeProcess(tmp_path, env)
        server.crash = CrashPoints(fleet.redis, enabled=True)  # the workers run with crash points armed by tests
        try:
            server.start()
            yield server
        finally:
            server.stop()
            fleet.stop()


@pytest.fixture
def page(tmp_path):
    if not Path(CHROMIUM).exists():
        # .ci/run installs it: in CI a missing browser is a failure, not a skip.
        (pytest.fail if os.environ.get("CI") else pytest.skip)(
            "Debian's chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        context = browser.new_context(viewport={"width": 1440, "height": 900})
        page = context.new_page()
        page.set_default_timeout(30_000)
        yield page
        context.close()
        browser.close()


def shot(page, tmp_path: Path, name: str) -> Path:
    path = tmp_path / "screenshots" / f"{name}.png"
    path.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(path), full_page=True)
    if os.environ.get("SCREENSHOT_DIR"):
        Path(os.environ["SCREENSHOT_DIR"]).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(os.environ["SCREENSHOT_DIR"]) / path.name)
    return path


@pytest.mark.timeout(600)
def test_operator_adds_a_source_watches_it_retries_a_failure_and_searches(fleet_app, page, tmp_path):
    from playwright.sync_api import expect

    folder = write_docs(tmp_path / "handbook", 24)
    url = fleet_app.url

    # Log in: a wrong token is refused, the right one opens the overview.
    page.goto(url + "/admin")
    expect(page).to_have_url(url + "/admin/login?next=/admin")
    page.fill("#token", "not-the-token")
    page.keyboard.press("Enter")
    expect(page.locator(".error")).to_contain_text("not valid")
    page.fill("#token", TOKEN)
    page.keyboard.press("Enter")
    expect(page).to_have_url(url + "/admin")
    cookie = next(c for c in page.context.cookies() if c["name"] == "headwater_session")
    assert cookie["httpOnly"] and cookie["secure"] and cookie["sameSite"] == "Strict"
    expect(page.locator("#queues")).to_contain_text("headwater.embed.dense")

    # Add a folder source from the keyboard; its first run starts and the page follows it live.
    fleet_app.crash.arm(HELD_POINT, uri=HELD_URI, action=HOLD)
    page.focus("#f-id")
    page.keyboard.type("handbook")
    page.keyboard.press("Tab")
    page.keyboard.type(str(folder))
    page.keyboard.press("Enter")
    page.wait_for_url("**/admin/runs/**")
    run_url = page.url
    expect(page.locator(".notice")).to_contain_text("Added handbook")
    seen, status = set(), "pending"
    for _ in range(480):  # two minutes
        held = fleet_app.crash.held(HELD_POINT)  # before the read: the run cannot finish while it holds
        progress, status = page.evaluate(READ_RUN)
        seen.add(progress)
        if (held and len(seen) >= 2) or status not in ("running", "pending"):
            break
        page.wait_for_timeout(250)
    assert len(seen) >= 2 and status == "running", f"progress never moved on the page: {seen}, status {status}"
    shot(page, tmp_path, "2-run-in-progress")
    fleet_app.crash.release(HELD_POINT)
    expect(page.locator("#run-status")).to_have_text("complete with errors", timeout=240_000)
    assert page.url == run_url  # the page was never reloaded: the panel refreshed itself
    expect(page.locator("#run .sub").first).to_have_text("25 / 25 documents")
    expect(page.locator("#failed")).to_contain_text("latin1.md")
    expect(page.locator("#failed")).to_contain_text("not valid UTF-8")
    shot(page, tmp_path, "3-run-with-failure")

    # Fix the file and retry the failed document with the button.
    (folder / "latin1.md").write_text("café au lait, now valid UTF-8\n", encoding="utf-8")
    page.click("#retry")
    page.wait_for_url(lambda u: u != run_url and "/admin/runs/" in u)
    expect(page.locator("#run-status")).to_have_text("complete", timeout=240_000)
    expect(page.locator("#run")).to_contain_text("None")

    # Search: "/" focuses the box; results show their dense and sparse ranks.
    page.goto(url + "/admin")
    page.keyboard.press("/")
    page.keyboard.type("how do I rotate the Chroma token")
    page.keyboard.press("Enter")
    page.wait_for_url("**/admin/search?**")
    expect(page.locator("#hits li").first).to_contain_text("note-")
    expect(page.locator("#hits li").first).to_contain_text("dense #")  # auto: dense on a collection of prose
    page.goto(page.url + "&mode=hybrid")
    expect(page.locator("#hits li").first).to_contain_text("dense #")
    expect(page.locator("#hits li").first).to_contain_text("sparse #")
    shot(page, tmp_path, "4-search")

    page.goto(url + "/admin")
    expect(page.locator("#sources")).to_contain_text("handbook")
    expect(page.locator("#sources tr[data-source=handbook]")).to_contain_text("complete")
    page.wait_for_timeout(6000)  # a few chart samples
    overview = shot(page, tmp_path, "1-overview")
    assert overview.stat().st_size > 10_000

    # A form posted without the session's CSRF token changes nothing.
    status = page.evaluate("""async () => (await fetch('/admin/sources', {method: 'POST',
        headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: 'id=forged&path=/tmp'})).status""")
    assert status == 403
    expect(page.locator("#sources")).not_to_contain_text("forged")


@pytest.mark.timeout(180)
def test_the_api_docs_render_offline_with_an_authorize_button(page, tmp_path):
    """FastAPI writes OpenAPI 3.1: a Swagger UI that cannot read it shows 'Unable to render this definition'."""
    from playwright.sync_api import expect

    with ServeProcess(tmp_path, {"HEADWATER_CHROMA_PATH": str(tmp_path / "chroma"),
                                 "HEADWATER_SESSION_COOKIE_SECURE": "true"}) as serve:
        offsite: list[str] = []
        page.on("request", lambda request: offsite.append(request.url)
                if not request.url.startswith(serve.url) else None)
        page.goto(serve.url + "/admin/login")
        page.fill("#token", TOKEN)
        page.keyboard.press("Enter")
        page.wait_for_url(serve.url + "/admin")
        page.goto(serve.url + "/docs")
        expect(page.locator(".swagger-ui .authorize")).to_be_visible()
        expect(page.locator(".swagger-ui")).to_contain_text("/api/v1/sources")
        expect(page.locator(".swagger-ui")).not_to_contain_text("Unable to render")
        shot(page, tmp_path, "5-api-docs")
        assert offsite == []  # nothing fetched from a CDN

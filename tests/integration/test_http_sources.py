"""Sources of every kind through the REST API and the dashboard of an embedded serve: created, read,
updated, deleted and synced for real (a folder, a private git repository over HTTP, a website and an
S3 bucket on loopback); and one bad option refused with one message by the API, the CLI and the
dashboard, changing nothing.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import boto3
import httpx
import pytest

from tests.git_http import private_git_server
from tests.git_repos import Repository
from tests.integration.http_harness import TOKEN, ServeProcess
from tests.integration.test_http_embedded import write_docs
from tests.services import moto_server
from tests.web_site import Site, serve as serve_site

pytestmark = pytest.mark.integration
GIT_TOKEN = "ghp_SourcesTestToken0123456789"
AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "moto-secret-never-shown-7c1e",
       "AWS_DEFAULT_REGION": "us-east-1"}
# A git URL with a token in it: refused everywhere, with this message, and the token never echoed.
LEAKY_URL = f"https://x-access-token:{GIT_TOKEN}@github.com/acme/api.git"
REFUSAL = ("options.url: a git source's URL must not hold credentials; put the token in an environment variable "
           "and name it in the source's token_env option")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """An embedded serve, and beside it a private git server, a website and an S3 endpoint on loopback."""
    work = tmp_path_factory.mktemp("sources")
    repo = Repository(work / "remotes", "handbook")
    repo.write("README.md", "# Handbook\n\nHow the on-call rotation hands over the pager.\n")
    repo.write("guide/setup.md", "# Setup\n\nInstall the toolchain, then run the bootstrap script.\n")
    repo.commit_and_push("first")
    site = Site()
    site.page("/", '<html><head><title>Docs</title></head><body><main><h1>Docs home</h1><p>Welcome to the '
                   'documentation of the widget factory.</p><a href="/guide.html">Guide</a></main></body></html>')
    site.page("/guide.html", "<html><head><title>Guide</title></head><body><main><h1>Guide</h1><p>Calibrate the "
                             "widget press before the morning shift.</p></main></body></html>")
    with private_git_server(work / "remotes", GIT_TOKEN) as (git_base, _), serve_site(site), \
            moto_server(work) as s3_endpoint:
        s3 = boto3.client("s3", endpoint_url=s3_endpoint, aws_access_key_id=AWS["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=AWS["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")
        s3.create_bucket(Bucket="reports")
        s3.put_object(Bucket="reports", Key="q1/summary.md", Body=b"# Q1\n\nRevenue grew in the northern region.\n")
        s3.put_object(Bucket="reports", Key="other/skip.md", Body=b"# Elsewhere\n")
        server = ServeProcess(work, {"HEADWATER_CHROMA_PATH": str(work / "chroma"),
                                     "HEADWATER_CONFIG_FILE": str(work / "none.toml"),
                                     "HEADWATER_FOLDER_ROOTS": json.dumps([str(work)]),
                                     "HEADWATER_GIT_CACHE_DIR": str(work / "git-cache"),
                                     "SOURCES_TEST_GIT_TOKEN": GIT_TOKEN, **AWS})
        with server:
            server.work, server.repo, server.site = work, repo, site
            server.git_url, server.s3_endpoint, server.s3 = f"{git_base}/handbook.git", s3_endpoint, s3
            yield server


def bodies(world) -> dict[str, dict]:
    """One source of each kind, as an API client sends it."""
    folder = write_docs(world.work / "folder-docs", 2, bad=False)
    return {
        "folder": {"id": "api-folder", "kind": "folder", "options": {"path": str(folder)}},
        "git": {"id": "api-git", "kind": "git", "options": {"url": world.git_url, "branch": "main",
                                                            "token_env": "SOURCES_TEST_GIT_TOKEN"}},
        "web": {"id": "api-web", "kind": "web", "options": {"start_urls": [world.site.url("/")],
                                                            "allow_private_addresses": True, "delay_seconds": 0}},
        "s3": {"id": "api-s3", "kind": "s3", "options": {"bucket": "reports", "prefix": "q1",
                                                          "endpoint_url": world.s3_endpoint}},
    }


EXPECTED = {"folder": {"note-000.md", "note-001.md"}, "git": {"README.md", "guide/setup.md"},
            "s3": {"q1/summary.md"}}


def stored_ids(world) -> set[str]:
    return {s["id"] for s in world.api.get("/api/v1/sources").json()}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", ["folder", "git", "web", "s3"])
def test_api_creates_reads_updates_syncs_and_deletes_a_source_of_each_kind(world, kind):
    body = bodies(world)[kind]
    created = world.api.post("/api/v1/sources", json=body)
    assert created.status_code == 201, created.text
    assert created.json()["kind"] == kind and created.json()["origin"] == "api"
    assert world.api.get(f"/api/v1/sources/{body['id']}").json()["options"] == created.json()["options"]

    run_id = world.api.post(f"/api/v1/sources/{body['id']}/runs").json()["run_id"]
    run = world.wait_for_run(run_id, 300)
    assert run["status"] == "complete", run
    documents = {d["uri"] for d in world.api.get(f"/api/v1/sources/{body['id']}/documents").json()["documents"]}
    expected = EXPECTED.get(kind) or {world.site.url("/"), world.site.url("/guide.html")}
    assert documents == expected

    changed = {**body["options"], "include": ["nothing-matches-this/**"]}
    updated = world.api.put(f"/api/v1/sources/{body['id']}", json={"kind": kind, "options": changed,
                                                                    "schedule_cron": "0 3 * * *"})
    assert updated.status_code == 200, updated.text
    assert updated.json()["options"]["include"] == ["nothing-matches-this/**"]
    assert updated.json()["schedule_cron"] == "0 3 * * *"
    assert world.api.delete(f"/api/v1/sources/{body['id']}").status_code == 204
    assert world.api.get(f"/api/v1/sources/{body['id']}").status_code == 404
    assert GIT_TOKEN not in world.log() and AWS["AWS_SECRET_ACCESS_KEY"] not in world.log()


@pytest.mark.timeout(120)
def test_secrets_are_named_never_given_and_never_shown(world):
    body = {**bodies(world)["git"], "id": "named-secret"}
    created = world.api.post("/api/v1/sources", json=body).json()
    assert created["secret_options"] == ["token_env"] and created["options"]["token_env"] == "SOURCES_TEST_GIT_TOKEN"
    pasted = world.api.post("/api/v1/sources", json={**body, "id": "pasted",
                                                     "options": {**body["options"], "token_env": GIT_TOKEN}})
    assert pasted.status_code == 422 and pasted.json()["errors"][0]["field"] == "options.token_env"
    assert GIT_TOKEN not in pasted.text
    world.api.delete("/api/v1/sources/named-secret").raise_for_status()
    assert GIT_TOKEN not in world.log()


def _dashboard(world) -> tuple[httpx.Client, str]:
    browser = httpx.Client(base_url=world.url, timeout=60)
    assert browser.post("/admin/login", data={"token": TOKEN, "next": "/admin"}).status_code == 303
    csrf = re.search(r'name="csrf" value="([^"]+)"', browser.get("/admin/sources/new?kind=git").text).group(1)
    return browser, csrf


@pytest.mark.timeout(180)
def test_one_bad_option_one_message_on_every_surface_and_nothing_changes(world, tmp_path):
    before = stored_ids(world)
    runs_before = world.api.get("/api/v1/runs").json()

    api = world.api.post("/api/v1/sources", json={"id": "leaky", "kind": "git", "options": {"url": LEAKY_URL}})
    assert api.status_code == 422
    assert api.json()["detail"] == REFUSAL and api.json()["errors"] == [{"field": "options.url", "message": REFUSAL[13:]}]

    # headwater.toml and the command line's URL form go through the same model.
    (tmp_path / "headwater.toml").write_text(f'[[sources]]\nid = "leaky"\nkind = "git"\noptions = {{ url = "{LEAKY_URL}" }}\n')
    env = {"HEADWATER_CHROMA_PATH": str(tmp_path / "chroma"), "HEADWATER_CONFIG_FILE": str(tmp_path / "headwater.toml"),
           "PATH": "/usr/bin:/bin", "COLUMNS": "300"}
    for target in ("leaky", f"git+{LEAKY_URL}"):
        cli = subprocess.run([sys.executable, "-m", "headwater.cli", "sync", target], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
        assert cli.returncode == 1, cli.stderr
        assert " ".join(cli.stderr.split()) == f"error: {REFUSAL}"
        assert GIT_TOKEN not in cli.stdout + cli.stderr
    assert not (tmp_path / "chroma").exists()

    browser, csrf = _dashboard(world)
    try:
        form = browser.post("/admin/sources", data={"csrf": csrf, "kind": "git", "id": "leaky", "url": LEAKY_URL,
                                                    "branch": "main"}, follow_redirects=True)
        assert form.status_code == 422 and [r.status_code for r in form.history] == [303]
        assert f'<p class="error" role="alert">{REFUSAL}</p>' in form.text.replace("&#39;", "'")
        assert GIT_TOKEN not in form.text.replace(f'value="{LEAKY_URL}"', "")  # only in the field the user typed it in
        assert "Traceback" not in form.text and "validation error" not in form.text
        # A field the API refuses by name is refused by the same name in the form.
        typo = browser.post("/admin/sources", data={"csrf": csrf, "kind": "web", "id": "typo",
                                                    "start_urls": "gopher://x", "max_depth": "deep"},
                            follow_redirects=True)
        api_typo = world.api.post("/api/v1/sources", json={"id": "typo", "kind": "web", "options": {
            "start_urls": ["gopher://x"], "max_depth": "deep"}})
        assert typo.status_code == api_typo.status_code == 422
        assert api_typo.json()["detail"] in typo.text.replace("&#39;", "'")
        assert "options.max_depth" in api_typo.json()["detail"] and "options.start_urls" in api_typo.json()["detail"]
    finally:
        browser.close()
    assert stored_ids(world) == before and world.api.get("/api/v1/runs").json() == runs_before
    assert GIT_TOKEN not in world.log()


@pytest.mark.timeout(300)
def test_dashboard_adds_views_edits_syncs_and_deletes_a_git_source(world):
    browser, csrf = _dashboard(world)
    try:
        page = browser.get("/admin/sources/new?kind=git")
        assert page.status_code == 200 and 'name="token_env"' in page.text and 'name="path"' not in page.text
        added = browser.post("/admin/sources", data={"csrf": csrf, "kind": "git", "id": "form-git", "url": world.git_url,
                                                     "branch": "main", "token_env": "SOURCES_TEST_GIT_TOKEN",
                                                     "include": "**/*.md"}, follow_redirects=False)
        assert added.status_code == 303, added.text
        run_id = added.headers["location"].split("/admin/runs/")[1].split("?")[0]
        assert world.wait_for_run(run_id, 300)["status"] == "complete"
        assert world.api.get("/api/v1/sources/form-git").json()["options"] == {
            "url": world.git_url, "branch": "main", "include": ["**/*.md"], "token_env": "SOURCES_TEST_GIT_TOKEN"}

        view = browser.get("/admin/sources/form-git")
        assert view.status_code == 200 and world.git_url in view.text and "SOURCES_TEST_GIT_TOKEN" in view.text
        bad_edit = browser.post("/admin/sources/form-git", data={"csrf": csrf, "url": world.git_url, "branch": "a..b"},
                                follow_redirects=True)
        assert bad_edit.status_code == 422 and "options.branch: " in bad_edit.text
        saved = browser.post("/admin/sources/form-git", data={"csrf": csrf, "url": world.git_url, "branch": "main",
                                                              "token_env": "SOURCES_TEST_GIT_TOKEN",
                                                              "include": "guide/**"}, follow_redirects=False)
        assert saved.status_code == 303 and saved.headers["location"].startswith("/admin/sources/form-git")
        assert world.api.get("/api/v1/sources/form-git").json()["options"]["include"] == ["guide/**"]
        synced = browser.post("/admin/sources/form-git/sync", data={"csrf": csrf}, follow_redirects=False)
        run = world.wait_for_run(synced.headers["location"].split("/admin/runs/")[1].split("?")[0], 300)
        assert run["status"] == "complete" and run["deleted"] == 1  # README.md left the source
        deleted = browser.post("/admin/sources/form-git/delete", data={"csrf": csrf, "documents": "keep"},
                               follow_redirects=False)
        assert deleted.status_code == 303
        assert world.api.get("/api/v1/sources/form-git").status_code == 404
    finally:
        browser.close()
    assert GIT_TOKEN not in world.log()

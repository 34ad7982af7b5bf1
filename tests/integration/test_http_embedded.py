"""The HTTP app in embedded mode, driven over real HTTP: one serve process owns the embedded Chroma."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.http_harness import TOKEN, ServeProcess
from tests.services import wait_until

pytestmark = pytest.mark.integration
SECRET_LOOKALIKE = "sk-live-Zq8v3Hn1Xr7Tp2Wd"


def write_docs(folder: Path, count: int = 3, bad: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    topics = ["rotating the Chroma token", "restoring a backup of the vector store", "onboarding a new engineer",
              "tuning the SPLADE encoder", "scheduling reconciliation runs"]
    for i in range(count):
        topic = topics[i % len(topics)]
        (folder / f"note-{i:03}.md").write_text(f"# Note {i}: {topic}\n\nThis page explains {topic} step by step. "
                                                f"It is document number {i} of the handbook.\n", encoding="utf-8")
    if bad:
        (folder / "latin1.md").write_bytes(b"caf\xe9 au lait, not UTF-8\n")
    return folder


@pytest.fixture(scope="module")
def serve(tmp_path_factory):
    work = tmp_path_factory.mktemp("serve-embedded")
    declared = write_docs(work / "declared", 2, bad=False)
    (work / "headwater.toml").write_text(
        f'[[sources]]\nid = "declared"\nkind = "folder"\noptions = {{ path = "{declared}" }}\n', encoding="utf-8")
    server = ServeProcess(work, {"HEADWATER_CHROMA_PATH": str(work / "chroma"),
                                 "HEADWATER_CONFIG_FILE": str(work / "headwater.toml"),
                                 "HEADWATER_FOLDER_ROOTS": json.dumps([str(work)])})
    with server:
        server.work = work
        yield server


def folder_source(source_id: str, path: Path, **extra) -> dict:
    return {"id": source_id, "kind": "folder", "options": {"path": str(path)}, **extra}


def sources(serve) -> set[str]:
    return {s["id"] for s in serve.api.get("/api/v1/sources").json()}


@pytest.mark.timeout(120)
def test_health_is_open_and_every_other_route_needs_the_token(serve):
    assert serve.anonymous.get("/healthz").status_code == 200
    assert serve.anonymous.get("/readyz").json()["mode"] == "embedded"
    for method, path in [("GET", "/api/v1/sources"), ("GET", "/api/v1/runs"), ("GET", "/api/v1/search?q=x"),
                         ("GET", "/metrics"), ("POST", "/api/v1/sources/declared/runs")]:
        assert serve.anonymous.request(method, path).status_code == 401, path
        wrong = serve.anonymous.request(method, path, headers={"Authorization": "Bearer not-the-token"})
        assert wrong.status_code == 403, path
    before_runs = serve.api.get("/api/v1/runs").json()
    folder = write_docs(serve.work / "unauthorised", 1, bad=False)
    refused = serve.anonymous.post("/api/v1/sources", json=folder_source("sneaky", folder),
                                   headers={"Authorization": "Bearer wrong-token-wrong-token"})
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0  # the sixth wrong token in a minute
    assert "sneaky" not in sources(serve)
    assert serve.api.get("/api/v1/runs").json() == before_runs
    # The dashboard: pages send an anonymous browser to the login, actions are refused outright.
    page = serve.anonymous.get("/admin", follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"].startswith("/admin/login")
    assert serve.anonymous.post("/admin/sources", data={"id": "sneaky", "path": str(folder)}).status_code == 403
    assert serve.anonymous.post("/admin/login", data={"token": "wrong"}).status_code == 401
    assert "sneaky" not in sources(serve)
    assert TOKEN not in serve.log()


@pytest.mark.timeout(120)
def test_source_crud_with_validation_and_write_only_secrets(serve):
    folder = write_docs(serve.work / "crud", 1, bad=False)
    created = serve.api.post("/api/v1/sources", json=folder_source("crud", folder, schedule_cron="0 3 * * *"))
    assert created.status_code == 201, created.text
    assert created.json()["origin"] == "api" and created.json()["schedule_cron"] == "0 3 * * *"
    listed = {s["id"]: s for s in serve.api.get("/api/v1/sources").json()}
    assert listed["declared"]["read_only"] and not listed["crud"]["read_only"]
    assert serve.api.post("/api/v1/sources", json=folder_source("crud", folder)).status_code == 409

    invalid = [folder_source("rel", Path("relative/path")), folder_source("missing", serve.work / "nope"),
               folder_source("outside", Path("/usr")),
               folder_source("both", folder, schedule_cron="* * * * *", schedule_interval_seconds=5),
               folder_source("badcron", folder, schedule_cron="every tuesday"),
               folder_source("tiny", folder, schedule_interval_seconds=0.1),
               {**folder_source("extra", folder), "unexpected": 1}, {"id": "../x", "kind": "folder", "options": {}},
               {**folder_source("nokind", folder), "kind": "ftp"},
               folder_source("secret", folder, secrets={"token": SECRET_LOOKALIKE})]
    for body in invalid:
        response = serve.api.post("/api/v1/sources", json=body)
        assert response.status_code == 422, (body, response.text)
        assert SECRET_LOOKALIKE not in response.text
    assert sources(serve) == {"declared", "crud"}

    updated = serve.api.put("/api/v1/sources/crud", json={"kind": "folder", "options": {"path": str(folder)},
                                                          "schedule_interval_seconds": 3600})
    assert updated.status_code == 200 and updated.json()["schedule_interval_seconds"] == 3600
    assert updated.json()["schedule_cron"] is None
    assert serve.api.put("/api/v1/sources/crud", json={"kind": "folder", "options": {"path": "/nope"}}).status_code == 422
    assert serve.api.get("/api/v1/sources/crud").json()["schedule_interval_seconds"] == 3600
    assert serve.api.put("/api/v1/sources/declared", json={"kind": "folder", "options": {"path": str(folder)}}).status_code == 409
    assert serve.api.delete("/api/v1/sources/declared").status_code == 409
    assert serve.api.delete("/api/v1/sources/crud").status_code == 204
    assert serve.api.get("/api/v1/sources/crud").status_code == 404
    assert serve.api.delete("/api/v1/sources/crud").status_code == 404
    assert SECRET_LOOKALIKE not in serve.log()


@pytest.mark.timeout(300)
def test_trigger_then_failed_document_then_retry(serve):
    folder = write_docs(serve.work / "handbook", 4)
    (folder / "empty.md").write_bytes(b"")
    assert serve.api.post("/api/v1/sources", json=folder_source("handbook", folder)).status_code == 201
    queued = serve.api.post("/api/v1/sources/handbook/runs")
    assert queued.status_code == 202, queued.text
    run = serve.wait_for_run(queued.json()["run_id"])
    assert run["status"] == "complete_with_errors" and run["trigger"] == "manual", run
    assert run["indexed"] == 4 and run["failed"] == 1 and run["skipped"] == 1
    assert run["skipped_documents"] == [{"uri": "empty.md", "reason": "empty file (0 bytes)"}]
    assert "not valid UTF-8" in run["errors"]["latin1.md"]
    failed = serve.api.get("/api/v1/sources/handbook/failed").json()
    assert failed["run_id"] == run["id"] and [d["uri"] for d in failed["documents"]] == ["latin1.md"]
    docs = serve.api.get("/api/v1/sources/handbook/documents").json()
    assert docs["total"] == 4 and all(d["chunks"] >= 1 for d in docs["documents"])

    (folder / "latin1.md").write_text("café au lait, now valid UTF-8\n", encoding="utf-8")
    retried = serve.api.post("/api/v1/sources/handbook/failed/retry")
    assert retried.status_code == 202, retried.text
    again = serve.wait_for_run(retried.json()["run_id"])
    assert again["kind"] == "retry" and again["trigger"] == "retry" and again["status"] == "complete" and again["indexed"] == 1, again
    assert serve.api.get("/api/v1/sources/handbook/failed").json()["documents"] == []
    assert serve.api.post(f"/api/v1/runs/{again['id']}/retry").status_code == 409  # nothing left to retry
    assert serve.api.get("/api/v1/sources/handbook/documents").json()["total"] == 5
    assert serve.api.post("/api/v1/runs/nope/retry").status_code == 404


@pytest.mark.timeout(300)
def test_search_returns_what_headwater_query_returns(serve):
    folder = write_docs(serve.work / "searchable", 5, bad=False)
    serve.api.post("/api/v1/sources", json=folder_source("searchable", folder)).raise_for_status()
    serve.wait_for_run(serve.api.post("/api/v1/sources/searchable/runs").json()["run_id"])
    for mode in ("hybrid", "dense", "sparse"):
        hits = serve.api.get("/api/v1/search", params={"q": "rotate the Chroma token", "k": 4, "mode": mode})
        assert hits.status_code == 200, hits.text
        cli = subprocess.run([sys.executable, "-m", "headwater.cli", "query", "rotate the Chroma token", "-k", "4",
                              "--mode", mode, "--json"], env=serve.env, cwd=serve.work, capture_output=True,
                             text=True, timeout=120)
        assert cli.returncode == 0, cli.stderr
        expected = json.loads(cli.stdout)
        got = hits.json()
        assert [(h["uri"], h["best_chunk"]["id"], h["dense_rank"], h["sparse_rank"]) for h in got] == \
               [(h["uri"], h["best_chunk"]["id"], h["dense_rank"], h["sparse_rank"]) for h in expected]
        assert got and pytest.approx([h["score"] for h in expected]) == [h["score"] for h in got]
    top = serve.api.get("/api/v1/search", params={"q": "rotate the Chroma token", "source_id": "searchable"}).json()
    assert top and all(h["source_id"] == h["best_chunk"]["metadata"]["source_id"] == "searchable" for h in top)
    for bad in ({"q": ""}, {"q": "x", "k": 0}, {"q": "x", "mode": "fuzzy"}, {"q": "x", "where": "{not json"},
                {"q": "x", "where": '{"$bogus": 1}'}):
        assert serve.api.get("/api/v1/search", params=bad).status_code == 422, bad


def write_handbook(folder: Path) -> Path:
    """Three documents of several sections each, all about the same few topics: every document has
    several chunks that match a query, so grouping by document changes what a search returns."""
    folder.mkdir(parents=True, exist_ok=True)
    topics = ["rotating the Chroma token", "restoring a backup", "tuning the SPLADE encoder", "onboarding engineers"]
    for n, name in enumerate(("operations", "security", "platform")):
        sections = []
        for m in range(6):
            topic = topics[(n + m) % len(topics)]
            words = " ".join(f"In step {s} of {topic}, the {name} team checks the proxy, the token and the logs "
                             f"before it moves on to the next step." for s in range(12))
            sections.append(f"## Section {m}: {topic}\n\n{words}\n")
        (folder / f"{name}.md").write_text(f"# The {name} handbook\n\n" + "\n".join(sections), encoding="utf-8")
    return folder


@pytest.mark.timeout(240)
def test_every_surface_returns_the_same_documents_in_the_same_order(serve):
    import re

    folder = write_handbook(serve.work / "manuals")
    added = serve.api.post("/api/v1/sources", json=folder_source("manuals", folder))
    assert added.status_code == 201, added.text
    serve.wait_for_run(serve.api.post("/api/v1/sources/manuals/runs").json()["run_id"])
    query = "rotate the Chroma token at the proxy"
    python_api = ("import json, sys, headwater\n"
                  "hits = headwater.search(sys.argv[1], k=3, mode=sys.argv[2], source_id='manuals')\n"
                  "print(json.dumps([h.to_json() for h in hits]))")
    for mode in ("auto", "hybrid", "dense", "sparse"):
        api = serve.api.get("/api/v1/search", params={"q": query, "k": 3, "mode": mode, "source_id": "manuals"})
        assert api.status_code == 200, api.text
        documents = [(h["source_id"], h["uri"]) for h in api.json()]
        assert sorted(documents) == [("manuals", f"{n}.md") for n in ("operations", "platform", "security")], mode
        # Each document carries its best chunk and its other matching chunks, several of them here.
        assert all(h["best_chunk"]["uri"] == h["uri"] and h["matching_chunks"] >= 1 + len(h["other_chunks"])
                   for h in api.json())
        assert any(h["other_chunks"] for h in api.json()), mode
        cli = subprocess.run([sys.executable, "-m", "headwater.cli", "query", query, "-k", "3", "--mode", mode,
                              "--source", "manuals", "--json"], env=serve.env, cwd=serve.work, capture_output=True,
                             text=True, timeout=120)
        assert cli.returncode == 0, cli.stderr
        assert [(h["source_id"], h["uri"]) for h in json.loads(cli.stdout)] == documents, mode
        assert [h["best_chunk"]["id"] for h in json.loads(cli.stdout)] == [h["best_chunk"]["id"] for h in api.json()]
        python = subprocess.run([sys.executable, "-c", python_api, query, mode], env=serve.env, cwd=serve.work,
                                capture_output=True, text=True, timeout=120)
        assert python.returncode == 0, python.stderr
        assert [(h["source_id"], h["uri"]) for h in json.loads(python.stdout)] == documents

    browser = httpx.Client(base_url=serve.url, timeout=60)
    try:
        assert browser.post("/admin/login", data={"token": TOKEN, "next": "/admin"}).status_code == 303
        page = browser.get("/admin/search", params={"q": query, "k": 3, "source_id": "manuals"})
        assert page.status_code == 200
        shown = re.findall(r'<div class="hit-head"><code>([^<]*)</code> · <strong>([^<]*)</strong>', page.text)
        api = serve.api.get("/api/v1/search", params={"q": query, "k": 3, "source_id": "manuals"}).json()
        assert shown == [(h["source_id"], h["uri"]) for h in api]
        for hit in api:  # the page lists each document's matching chunks
            for chunk in [hit["best_chunk"], *hit["other_chunks"]]:
                assert f'data-chunk-id="{chunk["id"]}"' in page.text
        chunks_page = browser.get("/admin/search", params={"q": query, "k": 5, "source_id": "manuals",
                                                           "group_by": "chunk"})
        assert len(re.findall(r'<div class="hit-head">', chunks_page.text)) == 5 and "data-chunk-id" not in chunks_page.text
    finally:
        browser.close()

    # Chunks stay available: more than one chunk of the same document among the k best.
    chunks = serve.api.get("/api/v1/search", params={"q": query, "k": 6, "source_id": "manuals",
                                                     "group_by": "chunk"}).json()
    assert len(chunks) == 6 and all("text" in h and "best_chunk" not in h for h in chunks)
    assert len({h["uri"] for h in chunks}) < 6
    cli = subprocess.run([sys.executable, "-m", "headwater.cli", "query", query, "-k", "6", "--source", "manuals",
                          "--per-chunk", "--json"], env=serve.env, cwd=serve.work, capture_output=True, text=True,
                         timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert [h["id"] for h in json.loads(cli.stdout)] == [h["id"] for h in chunks]
    assert serve.api.get("/api/v1/search", params={"q": query, "group_by": "page"}).status_code == 422
    serve.api.delete("/api/v1/sources/manuals").raise_for_status()


@pytest.mark.timeout(300)
def test_cancel_stops_a_running_sync(serve):
    folder = write_docs(serve.work / "large", 400, bad=False)
    serve.api.post("/api/v1/sources", json=folder_source("large", folder)).raise_for_status()
    run_id = serve.api.post("/api/v1/sources/large/runs").json()["run_id"]
    busy = serve.api.post("/api/v1/sources/large/runs")
    assert busy.status_code == 409 and busy.json()["busy_run"] == run_id
    wait_until(lambda: serve.api.get(f"/api/v1/runs/{run_id}").json()["progress"]["done"] > 0, 120, "first documents")
    cancelled = serve.api.post(f"/api/v1/runs/{run_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    run = serve.wait_for_run(run_id, 120)
    assert run["status"] == "cancelled" and run["indexed"] < 400, run
    assert run["progress"] == {"done": run["indexed"], "total": 400}, run  # how far it got, not a full bar
    assert serve.api.post(f"/api/v1/runs/{run_id}/cancel").status_code == 409
    assert serve.api.post("/api/v1/runs/does-not-exist/cancel").status_code == 404
    serve.api.delete("/api/v1/sources/large").raise_for_status()


@pytest.mark.timeout(300)
def test_a_source_added_through_the_api_is_scheduled_and_runs_never_overlap(serve):
    folder = write_docs(serve.work / "scheduled", 60, bad=False)
    body = folder_source("scheduled", folder, schedule_interval_seconds=2)
    serve.api.post("/api/v1/sources", json=body).raise_for_status()
    assert serve.api.get("/api/v1/sources/scheduled").json()["schedule_interval_seconds"] == 2

    def runs() -> list[dict]:
        return serve.api.get("/api/v1/runs", params={"source_id": "scheduled", "limit": 50}).json()

    # The first run embeds 60 documents (longer than the 2 s period); ticks during it are skipped.
    wait_until(lambda: sum(r["finished"] for r in runs()) >= 3, 240, "three scheduled runs")
    serve.api.delete("/api/v1/sources/scheduled").raise_for_status()
    finished = sorted((r for r in runs() if r["finished"]), key=lambda r: r["started_at"])
    for before, after in zip(finished, finished[1:]):
        assert after["started_at"] >= before["finished_at"], (before, after)
    assert finished[0]["indexed"] == 60 and all(r["status"] == "complete" for r in finished)
    assert all(r["kind"] == "full" and r["trigger"] == "schedule" for r in finished)
    count = len(runs())
    time.sleep(5)  # removed: no more runs
    assert len([r for r in runs() if r["created_at"] > time.time() - 3]) == 0 and len(runs()) <= count + 1


@pytest.mark.timeout(180)
def test_a_second_writer_gets_the_lock_error_naming_serve(serve):
    other = subprocess.run([sys.executable, "-m", "headwater.cli", "sync", str(serve.work / "declared")],
                           env=serve.env, cwd=serve.work, capture_output=True, text=True, timeout=120)
    assert other.returncode == 1
    assert f"pid {serve.process.pid}" in other.stderr.replace("\n", " "), other.stderr
    second = ServeProcess(serve.work, serve.env, name="second-serve")
    with pytest.raises(Exception):
        second.start(60)
    assert f"pid {serve.process.pid}" in second.log().replace("\n", " ")
    second.stop()


@pytest.mark.timeout(60)
def test_metrics_are_prometheus_text(serve):
    metrics = serve.api.get("/metrics")
    assert metrics.status_code == 200
    assert "headwater_queue_depth" in metrics.text and "headwater_http_requests_total" in metrics.text
    assert httpx.get(serve.url + "/openapi.json").status_code == 401
    assert serve.api.get("/openapi.json").json()["paths"]


@pytest.mark.timeout(300)
def test_dashboard_login_and_csrf_protected_forms_in_embedded_mode(serve):
    import re

    browser = httpx.Client(base_url=serve.url, timeout=60)
    try:
        login = browser.post("/admin/login", data={"token": TOKEN, "next": "/admin"}, follow_redirects=False)
        assert login.status_code == 303 and "headwater_session" in login.cookies
        cookie_flags = login.headers["set-cookie"].lower()
        assert "httponly" in cookie_flags and "samesite=strict" in cookie_flags
        page = browser.get("/admin")
        assert page.status_code == 200 and "embedded mode" in page.text and "declared" in page.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
        folder = write_docs(serve.work / "from-the-form", 2, bad=False)
        form = {"id": "from-the-form", "path": str(folder), "include": "", "schedule_interval_seconds": "",
                "schedule_cron": ""}
        assert browser.post("/admin/sources", data=form).status_code == 403  # no CSRF token
        assert browser.post("/admin/sources", data={**form, "csrf": csrf + "x"}).status_code == 403
        assert "from-the-form" not in sources(serve)
        invalid = browser.post("/admin/sources", data={**form, "csrf": csrf, "path": "relative"}, follow_redirects=False)
        assert invalid.status_code == 303  # a reload of the refusal posts nothing again
        refusal = browser.get(invalid.headers["location"])
        assert refusal.status_code == 422 and "absolute" in refusal.text and "Nothing was changed." in refusal.text
        added = browser.post("/admin/sources", data={**form, "csrf": csrf}, follow_redirects=False)
        assert added.status_code == 303 and added.headers["location"].startswith("/admin/runs/")
        run_id = added.headers["location"].split("/admin/runs/")[1].split("?")[0]
        assert serve.wait_for_run(run_id)["status"] == "complete"
        assert "complete" in browser.get(f"/admin/fragments/runs/{run_id}").text
        search = browser.get("/admin/search", params={"q": "rotating the Chroma token", "mode": "hybrid"})
        assert search.status_code == 200 and "dense #" in search.text and "sparse #" in search.text
        assert browser.get("/admin/stats.json").json()["queue_depth"]
        assert browser.get("/openapi.json").status_code == 200  # the session also opens the API docs
        assert browser.post("/admin/logout", data={"csrf": csrf}, follow_redirects=False).status_code == 303
    finally:
        browser.close()
    serve.api.delete("/api/v1/sources/from-the-form").raise_for_status()


@pytest.mark.timeout(300)
def test_a_restarted_serve_keeps_each_schedules_next_run(tmp_path):
    """A serve redeployed more often than an interval must still run it: the period survives a restart."""
    folder = write_docs(tmp_path / "docs", 2, bad=False)
    env = {"HEADWATER_CHROMA_PATH": str(tmp_path / "chroma"), "HEADWATER_FOLDER_ROOTS": json.dumps([str(tmp_path)])}

    def next_run(server) -> float:
        found: dict = {}
        wait_until(lambda: found.update(server.api.get("/api/v1/sources/hourly").json()) or found.get("next_run_at"),
                   30, "the schedule's next run")
        return found["next_run_at"]

    with ServeProcess(tmp_path, env, "first") as first:
        first.api.post("/api/v1/sources", json=folder_source("hourly", folder, schedule_interval_seconds=3600)
                       ).raise_for_status()
        before = next_run(first)
        assert before == pytest.approx(time.time() + 3600, abs=30)
        wait_until(lambda: len(first.api.get("/api/v1/stats").json()["queue_depth"]["in-process"]) >= 3, 30,
                   "three chart samples")
    time.sleep(3)  # the restart takes longer than the tolerance below
    restarted_at = time.time()
    with ServeProcess(tmp_path, env, "second") as second:
        assert next_run(second) == pytest.approx(before, abs=1.5)
        # The charts still show the hour before the restart.
        samples = second.api.get("/api/v1/stats").json()["queue_depth"]["in-process"]
        assert sum(1 for point in samples if point["t"] < restarted_at) >= 3
        # Saving the source unchanged keeps the period too; a new interval starts one now.
        unchanged = {k: v for k, v in folder_source("hourly", folder, schedule_interval_seconds=3600).items() if k != "id"}
        second.api.put("/api/v1/sources/hourly", json=unchanged).raise_for_status()
        time.sleep(1.5)
        assert next_run(second) == pytest.approx(before, abs=1.5)
        second.api.put("/api/v1/sources/hourly", json={**unchanged, "schedule_interval_seconds": 7200}).raise_for_status()
        wait_until(lambda: next_run(second) > before + 3000, 30, "the new period")


@pytest.mark.timeout(120)
def test_api_docs_work_offline_and_declare_the_bearer_token(serve):
    page = serve.api.get("/docs")
    assert page.status_code == 200
    assert "/docs-assets/swagger-ui-bundle.js" in page.text and "/docs-assets/swagger-ui.css" in page.text
    assert "cdn." not in page.text and "https://" not in page.text  # nothing fetched from third parties
    for asset in ("/docs-assets/swagger-ui-bundle.js", "/docs-assets/swagger-ui.css", "/static/favicon.svg"):
        assert serve.anonymous.get(asset).status_code == 200, asset
    schema = serve.api.get("/openapi.json").json()
    assert schema["components"]["securitySchemes"]["adminToken"] == {
        "type": "http", "scheme": "bearer", "description": "HEADWATER_ADMIN_TOKEN"}
    assert schema["paths"]["/api/v1/sources"]["get"]["security"] == [{"adminToken": []}]
    assert schema["paths"]["/webhooks/s3/{source_id}"]["post"]["security"] == [{"s3WebhookToken": []}]
    assert "security" not in schema["paths"]["/healthz"]["get"]


@pytest.mark.timeout(300)
def test_a_source_in_its_own_collection_is_synced_counted_and_searched(serve):
    """One embedded directory holds many collections: a source that names its own is as much at home as the rest."""
    folder = serve.work / "own-collection"
    folder.mkdir()
    (folder / "leave.md").write_text("# Parental leave\n\nEmployees get sixteen weeks of parental leave.\n",
                                     encoding="utf-8")
    serve.api.post("/api/v1/sources", json=folder_source("own-handbook", folder, collection="handbook-docs")
                   ).raise_for_status()
    run = serve.api.post("/api/v1/sources/own-handbook/runs")
    assert run.status_code == 202, run.text
    assert serve.wait_for_run(run.json()["run_id"])["status"] == "complete"

    wait_until(lambda: serve.api.get("/api/v1/sources/own-handbook").json()["documents"] == 1, 30, "the source's counts")
    assert serve.api.get("/api/v1/sources/own-handbook").json()["chunks"] >= 1
    hits = serve.api.get("/api/v1/search", params={"q": "parental leave", "source_id": "own-handbook"}).json()
    assert hits and hits[0]["uri"] == "leave.md"
    with httpx.Client(base_url=serve.url, timeout=60) as browser:
        assert browser.post("/admin/login", data={"token": TOKEN, "next": "/admin"}).status_code == 303
        page = browser.get("/admin/search", params={"q": "parental leave", "source_id": "own-handbook"})
    assert page.status_code == 200 and "leave.md" in page.text
    metrics = serve.api.get("/metrics").text
    assert 'headwater_source_documents{source="own-handbook"} 1.0' in metrics
    # The default collection holds none of it.
    assert not [h for h in serve.api.get("/api/v1/search", params={"q": "parental leave"}).json()
                if h["uri"] == "leave.md"]



@pytest.mark.timeout(180)
def test_wrong_tokens_are_throttled_and_the_right_one_always_gets_in(tmp_path):
    with ServeProcess(tmp_path, {"HEADWATER_CHROMA_PATH": str(tmp_path / "chroma")}) as server:
        logins = [server.anonymous.post("/admin/login", data={"token": f"guess-{n}"}).status_code for n in range(7)]
        assert logins == [401] * 5 + [429] * 2
        throttled = server.anonymous.post("/admin/login", data={"token": "guess-8"})
        assert "try again in" in throttled.text and int(throttled.headers["retry-after"]) > 0
        with httpx.Client(base_url=server.url, timeout=60) as operator:  # behind a proxy: the same address
            assert operator.post("/admin/login", data={"token": TOKEN}).status_code == 303
            assert operator.get("/admin").status_code == 200
        guesses = [server.anonymous.get("/api/v1/sources", headers={"Authorization": f"Bearer guess-{n}"}).status_code
                   for n in range(7)]
        assert guesses == [403] * 5 + [429] * 2
        assert server.api.get("/api/v1/sources").status_code == 200


@pytest.mark.timeout(180)
def test_a_paused_schedule_runs_nothing_until_resumed(serve):
    folder = write_docs(serve.work / "paused", 1, bad=False)
    serve.api.post("/api/v1/sources", json=folder_source("paused", folder, schedule_interval_seconds=2)).raise_for_status()
    paused = serve.api.post("/api/v1/sources/paused/schedule/pause").json()
    assert paused["schedule_paused_at"] and paused["next_run_at"] is None

    def runs() -> int:
        return len(serve.api.get("/api/v1/runs", params={"source_id": "paused"}).json())

    time.sleep(5)  # two and a half periods
    assert runs() == 0
    assert serve.api.post("/api/v1/sources/paused/runs").status_code == 202  # manual syncs still run
    resumed = serve.api.post("/api/v1/sources/paused/schedule/resume").json()
    assert resumed["schedule_paused_at"] is None
    wait_until(lambda: runs() >= 2, 60, "a scheduled run after the resume")
    assert serve.api.post("/api/v1/sources/nope/schedule/pause").status_code == 404
    serve.api.delete("/api/v1/sources/paused").raise_for_status()


@pytest.mark.timeout(240)
def test_deleting_a_source_keeps_its_documents_unless_asked_to_remove_them(serve):
    for source_id, topic in (("kept-docs", "the lighthouse keeper's log"), ("purged-docs", "the orchard's pruning plan")):
        folder = serve.work / source_id
        folder.mkdir()
        (folder / "page.md").write_text(f"# {topic}\n\nEverything about {topic}.\n", encoding="utf-8")
        serve.api.post("/api/v1/sources", json=folder_source(source_id, folder)).raise_for_status()
        assert serve.wait_for_run(serve.api.post(f"/api/v1/sources/{source_id}/runs").json()["run_id"])["status"] == "complete"

    def found(query: str, source_id: str) -> bool:
        return bool(serve.api.get("/api/v1/search", params={"q": query, "source_id": source_id}).json())

    assert serve.api.delete("/api/v1/sources/kept-docs").status_code == 204
    assert found("lighthouse keeper", "kept-docs")  # the default: its chunks stay
    assert serve.api.delete("/api/v1/sources/purged-docs", params={"documents": "sideways"}).status_code == 422
    assert "purged-docs" in sources(serve)  # an invalid request changes nothing
    deleted = serve.api.delete("/api/v1/sources/purged-docs", params={"documents": "delete"})
    assert deleted.status_code == 204 and "purged-docs" not in sources(serve)
    run = serve.wait_for_run(deleted.headers["x-headwater-run"])
    assert run["status"] == "complete" and run["deleted"] == 1, run
    assert not found("orchard pruning plan", "purged-docs")

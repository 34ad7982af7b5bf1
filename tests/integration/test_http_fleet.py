"""The HTTP app in fleet mode, driven over real HTTP: serve queues runs for real worker and beat processes
over a private Redis and a `chroma run`, and keeps API sources in the machine's real PostgreSQL.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest

from tests.integration.fleet_harness import TEST_TIMING, FleetProcesses
from tests.integration.http_harness import TOKEN, ServeProcess
from tests.integration.postgres import postgres_database
from tests.integration.test_http_embedded import SECRET_LOOKALIKE, folder_source, sources, write_docs
from tests.services import chroma_server, redis_server, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def fleet_serve(tmp_path_factory):
    work = tmp_path_factory.mktemp("serve-fleet")
    with postgres_database() as database, redis_server(work) as redis_url, chroma_server(work) as (host, port):
        fleet = FleetProcesses(redis_url, host, port, work, timing={**TEST_TIMING,
                                                                    "HEADWATER_BEAT_MAX_LOOP_INTERVAL_SECONDS": "1"})
        fleet.env["HEADWATER_BEAT_MAX_LOOP_INTERVAL_SECONDS"] = "1"
        fleet.start_fleet()
        env = {k: v for k, v in fleet.env.items() if k.startswith("HEADWATER_")}
        env.update({"HEADWATER_DATABASE_URL": database, "HEADWATER_FOLDER_ROOTS": json.dumps([str(work)]),
                    "HEADWATER_CONFIG_FILE": str(work / "none.toml")})
        server = ServeProcess(work, env)
        try:
            server.start()
            server.work, server.fleet, server.database = work, fleet, database
            yield server
        finally:
            server.stop()
            fleet.stop()


@pytest.mark.timeout(180)
def test_auth_failures_change_nothing_and_sources_persist_in_postgres(fleet_serve):
    serve = fleet_serve
    assert serve.anonymous.get("/readyz").json()["mode"] == "fleet"
    folder = write_docs(serve.work / "kept", 1, bad=False)
    assert serve.anonymous.post("/api/v1/sources", json=folder_source("kept", folder)).status_code == 401
    assert serve.anonymous.post("/api/v1/sources", json=folder_source("kept", folder),
                                headers={"Authorization": "Bearer nope"}).status_code == 403
    assert "kept" not in sources(serve)
    bad = serve.api.post("/api/v1/sources", json=folder_source("kept", folder, secrets={"token": SECRET_LOOKALIKE}))
    assert bad.status_code == 422 and SECRET_LOOKALIKE not in bad.text
    assert serve.api.post("/api/v1/sources", json=folder_source("kept", folder)).status_code == 201
    # Redis is not durable; the source lives in PostgreSQL and a new serve process sees it.
    second = ServeProcess(serve.work, serve.env, name="serve-2").start()
    try:
        assert "kept" in {s["id"] for s in second.api.get("/api/v1/sources").json()}
    finally:
        second.stop()
    assert serve.api.put("/api/v1/sources/kept", json={"kind": "folder", "options": {"path": str(folder)},
                                                       "schedule_cron": "0 4 * * *"}).status_code == 200
    assert serve.api.get("/api/v1/sources/kept").json()["next_run_at"] is not None  # in the Redis-kept beat schedule
    assert serve.api.post("/api/v1/sources/kept/schedule/pause").json()["next_run_at"] is None
    assert not [m for m in serve.fleet.redis.zrange("headwater:redbeat::schedule", 0, -1) if b"kept" in m]  # beat's entry gone
    assert serve.api.post("/api/v1/sources/kept/schedule/resume").json()["next_run_at"] is not None
    assert serve.api.delete("/api/v1/sources/kept").status_code == 204
    assert "kept" not in sources(serve)
    assert SECRET_LOOKALIKE not in serve.log()


@pytest.mark.timeout(400)
def test_trigger_failed_document_retry_and_search_through_the_fleet(fleet_serve):
    serve = fleet_serve
    folder = write_docs(serve.work / "handbook", 4)
    (folder / "empty.md").write_bytes(b"")
    serve.api.post("/api/v1/sources", json=folder_source("handbook", folder)).raise_for_status()
    queued = serve.api.post("/api/v1/sources/handbook/runs")
    assert queued.status_code == 202, queued.text
    run = serve.wait_for_run(queued.json()["run_id"], 300)
    assert run["status"] == "complete_with_errors" and run["indexed"] == 4, run
    assert run["skipped"] == 1 and run["skipped_documents"] == [{"uri": "empty.md", "reason": "empty file (0 bytes)"}]
    assert "not valid UTF-8" in run["errors"]["latin1.md"]
    assert [d["uri"] for d in serve.api.get("/api/v1/sources/handbook/failed").json()["documents"]] == ["latin1.md"]
    (folder / "latin1.md").write_text("café au lait, now valid UTF-8\n", encoding="utf-8")
    retried = serve.api.post(f"/api/v1/runs/{run['id']}/retry")
    assert retried.status_code == 202, retried.text
    again = serve.wait_for_run(retried.json()["run_id"], 300)
    assert again["status"] == "complete" and again["kind"] == "retry" and again["trigger"] == "retry", again
    assert run["trigger"] == "manual"
    assert serve.api.get("/api/v1/sources/handbook/documents").json()["total"] == 5
    queues = serve.api.get("/api/v1/queues").json()
    assert set(queues) >= {"headwater.sync", "headwater.embed.dense"}
    wait_until(lambda: all(q["workers"] for q in serve.api.get("/api/v1/queues").json().values()), 30, "workers listed")

    hits = serve.api.get("/api/v1/search", params={"q": "rotate the Chroma token", "k": 4, "mode": "hybrid",
                                                   "group_by": "chunk"}).json()
    cli = subprocess.run([sys.executable, "-m", "headwater.cli", "query", "rotate the Chroma token", "-k", "4", "--json",
                          "--mode", "hybrid", "--per-chunk"],
                         env=serve.env, cwd=serve.work, capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert [(h["id"], h["dense_rank"], h["sparse_rank"]) for h in hits] == \
           [(h["id"], h["dense_rank"], h["sparse_rank"]) for h in json.loads(cli.stdout)]
    assert hits


@pytest.mark.timeout(400)
def test_cancel_a_fleet_run(fleet_serve):
    serve = fleet_serve
    folder = write_docs(serve.work / "large", 300, bad=False)
    serve.api.post("/api/v1/sources", json=folder_source("large", folder)).raise_for_status()
    run_id = serve.api.post("/api/v1/sources/large/runs").json()["run_id"]
    busy = serve.api.post("/api/v1/sources/large/runs")
    assert busy.status_code == 409 and busy.json()["busy_run"] == run_id
    wait_until(lambda: serve.api.get(f"/api/v1/runs/{run_id}").json()["status"] == "running", 120, "run started")
    assert serve.api.post(f"/api/v1/runs/{run_id}/cancel").status_code == 200
    run = serve.wait_for_run(run_id, 60)
    assert run["status"] == "cancelled" and run["indexed"] < 300, run
    assert serve.api.post(f"/api/v1/runs/{run_id}/cancel").status_code == 409
    serve.api.delete("/api/v1/sources/large").raise_for_status()


@pytest.mark.timeout(400)
def test_a_source_added_through_the_api_is_scheduled_by_the_running_beat_without_overlap(fleet_serve):
    serve = fleet_serve
    folder = write_docs(serve.work / "scheduled", 30, bad=False)
    # Beat has been running since before this source existed: redbeat reads the new entry from Redis.
    serve.api.post("/api/v1/sources", json=folder_source("scheduled", folder, schedule_interval_seconds=2)).raise_for_status()

    def runs() -> list[dict]:
        return serve.api.get("/api/v1/runs", params={"source_id": "scheduled", "limit": 100}).json()

    wait_until(lambda: sum(r["finished"] for r in runs()) >= 3, 300, "three scheduled runs")
    serve.api.delete("/api/v1/sources/scheduled").raise_for_status()
    time.sleep(3)  # let a message already sent finish
    finished = sorted((r for r in runs() if r["finished"]), key=lambda r: r["created_at"])
    for before, after in zip(finished, finished[1:]):
        assert after["created_at"] >= before["finished_at"], (before, after)
    assert finished[0]["indexed"] == 30 and all(r["status"] == "complete" for r in finished)
    settled = len(runs())
    time.sleep(5)
    assert len(runs()) == settled  # the schedule went with the source


@pytest.mark.timeout(300)
def test_schedules_come_back_after_redis_restarts_empty(fleet_serve):
    import redis

    serve = fleet_serve
    folder = write_docs(serve.work / "resilient", 2, bad=False)
    serve.api.post("/api/v1/sources", json=folder_source("resilient", folder, schedule_cron="0 5 * * *")).raise_for_status()
    assert serve.api.get("/api/v1/sources/resilient").json()["next_run_at"] is not None
    redis.Redis.from_url(serve.env["HEADWATER_REDIS_URL"]).flushall()
    assert serve.api.get("/api/v1/sources/resilient").json()["next_run_at"] is None
    # serve puts the entry back from its durable store; beat reinstalls the sweeper and keeps running.
    wait_until(lambda: serve.api.get("/api/v1/sources/resilient").json()["next_run_at"] is not None, 60, "entry restored")
    wait_until(lambda: redis.Redis.from_url(serve.env["HEADWATER_REDIS_URL"]).exists("headwater:redbeat::statics"), 60,
               "beat's static entries restored")
    assert all(p.poll() is None for p in serve.fleet.processes.values())
    serve.api.delete("/api/v1/sources/resilient").raise_for_status()


@pytest.mark.timeout(240)
def test_two_workers_on_one_host_are_two_and_a_lost_one_shows_offline(fleet_serve):
    """Each worker gets a name of its own by default, so the fleet counts it, and sees it go."""
    import os
    import signal

    serve = fleet_serve

    def consumers() -> set[str]:
        return set(serve.api.get("/api/v1/queues").json()["headwater.fetch"]["workers"])

    def states() -> dict[str, str]:
        return {w["name"]: w["state"] for w in serve.api.get("/api/v1/workers").json()}

    wait_until(lambda: "online" in states().values(), 60, "the fleet's first worker")
    original = {n for n, state in states().items() if state == "online"}
    lost = serve.fleet.start_worker("worker-lost")
    wait_until(lambda: len([n for n, state in states().items() if state == "online"]) == len(original) + 1, 60,
               "the second worker's heartbeat")
    (name,) = {n for n, state in states().items() if state == "online"} - original
    assert name.startswith("headwater-") and "@" in name
    # Celery's own view agrees (it caches for 10 s): two consumers of the fetch queue, not one.
    wait_until(lambda: len(consumers()) == len(original) + 1, 60, "two workers serving the fetch queue")
    record = next(w for w in serve.api.get("/api/v1/workers").json() if w["name"] == name)
    assert record["concurrency"] == 1 and "headwater.fetch" in record["queues"]

    os.killpg(lost.pid, signal.SIGKILL)  # the whole worker, as when its host goes
    lost.wait(timeout=30)
    wait_until(lambda: states().get(name) == "offline", 60, "the lost worker shown offline")
    page = _dashboard(serve).get("/admin/fragments/live").text
    assert name in page and "offline" in page and "last seen" in page

    stopped = serve.fleet.start_worker("worker-stopped")
    wait_until(lambda: len({n for n, state in states().items() if state == "online"} - original) == 1, 60,
               "the third worker's heartbeat")
    (third,) = {n for n, state in states().items() if state == "online"} - original
    stopped.terminate()  # a deploy stopping it on purpose
    stopped.wait(timeout=60)
    wait_until(lambda: states().get(third) == "stopped", 30, "the stopped worker")
    assert all(states()[w] == "online" for w in original)


def _dashboard(serve) -> httpx.Client:
    browser = httpx.Client(base_url=serve.url, timeout=60)
    assert browser.post("/admin/login", data={"token": TOKEN, "next": "/admin"}).status_code == 303
    return browser


@pytest.mark.timeout(400)
def test_a_source_in_its_own_collection_is_counted_and_searched_in_the_fleet(fleet_serve):
    serve = fleet_serve
    folder = serve.work / "leave-policy"
    folder.mkdir()
    (folder / "leave.md").write_text("# Parental leave\n\nEmployees get sixteen weeks of parental leave.\n",
                                     encoding="utf-8")
    serve.api.post("/api/v1/sources", json=folder_source("policy", folder, collection="policy-docs")).raise_for_status()
    run = serve.wait_for_run(serve.api.post("/api/v1/sources/policy/runs").json()["run_id"], 300)
    assert run["status"] == "complete", run
    wait_until(lambda: serve.api.get("/api/v1/sources/policy").json()["documents"] == 1, 30, "the source's counts")
    hits = serve.api.get("/api/v1/search", params={"q": "parental leave", "source_id": "policy"}).json()
    assert hits and hits[0]["uri"] == "leave.md"
    assert 'headwater_source_documents{source="policy"} 1.0' in serve.api.get("/metrics").text


@pytest.mark.timeout(400)
def test_deleting_a_source_with_its_documents_removes_them_through_the_fleet(fleet_serve):
    serve = fleet_serve
    folder = serve.work / "orchard"
    folder.mkdir()
    (folder / "pruning.md").write_text("# Pruning\n\nThe orchard's pruning plan, tree by tree.\n", encoding="utf-8")
    serve.api.post("/api/v1/sources", json=folder_source("orchard", folder)).raise_for_status()
    assert serve.wait_for_run(serve.api.post("/api/v1/sources/orchard/runs").json()["run_id"], 300)["status"] == "complete"
    deleted = serve.api.delete("/api/v1/sources/orchard", params={"documents": "delete"})
    assert deleted.status_code == 204
    run = serve.wait_for_run(deleted.headers["x-headwater-run"], 300)
    assert run["status"] == "complete" and run["deleted"] == 1, run
    assert not serve.api.get("/api/v1/search", params={"q": "orchard pruning plan", "source_id": "orchard"}).json()
@pytest.mark.timeout(400)
def test_a_git_source_added_through_the_api_is_synced_by_the_workers(fleet_serve):
    from tests.git_repos import Repository

    serve = fleet_serve
    repo = Repository(serve.work / "remotes", "fleet-handbook")
    repo.write("intro.md", "# Intro\n\nThe fleet reads this repository through the API's source.\n")
    repo.write("ops/pager.md", "# Pager\n\nWho carries the pager on weekends.\n")
    repo.commit_and_push("first")
    body = {"id": "fleet-git", "kind": "git", "options": {"url": repo.url, "branch": "main"}}
    assert serve.api.post("/api/v1/sources", json=body).status_code == 201
    run = serve.wait_for_run(serve.api.post("/api/v1/sources/fleet-git/runs").json()["run_id"], 300)
    assert run["status"] == "complete", run
    listed = serve.api.get("/api/v1/sources/fleet-git/documents").json()["documents"]
    assert {d["uri"] for d in listed} == {"intro.md", "ops/pager.md"}
    refused = serve.api.put("/api/v1/sources/fleet-git", json={"kind": "git", "options": {"url": repo.url, "branch": "-x"}})
    assert refused.status_code == 422 and refused.json()["errors"][0]["field"] == "options.branch"
    assert serve.api.get("/api/v1/sources/fleet-git").json()["options"]["branch"] == "main"
    assert serve.api.delete("/api/v1/sources/fleet-git").status_code == 204

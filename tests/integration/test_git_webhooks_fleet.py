"""POST /webhooks/github in fleet mode: serve fetches and diffs each push and queues it as live changes for
real worker and beat processes over a private Redis and a `chroma run`. Sources, cursors and delivery ids
live in a SQLite file here, so this never skips; tests/integration/test_source_store.py covers the same
store on PostgreSQL."""

from __future__ import annotations

import pytest

from tests.git_repos import Repository, delivery, push_payload
from tests.integration.fleet_harness import TEST_TIMING, FleetProcesses
from tests.integration.http_harness import ServeProcess
from tests.integration.test_git_webhooks import OTHER_SECRET, SECRET, git_source_toml, seed
from tests.services import chroma_server, redis_server, wait_until

pytestmark = pytest.mark.integration
COLLECTION = "git_fleet"


@pytest.fixture(scope="module")
def fleet_git_serve(tmp_path_factory):
    work = tmp_path_factory.mktemp("git-serve-fleet")
    repo = Repository(work / "remotes", "handbook")
    seed(repo)
    (work / "headwater.toml").write_text(git_source_toml("handbook", repo, "HANDBOOK_HOOK_SECRET", COLLECTION),
                                         encoding="utf-8")
    database = f"sqlite:///{work / 'sources.sqlite3'}"
    with redis_server(work) as redis_url, chroma_server(work) as (host, port):
        fleet = FleetProcesses(redis_url, host, port, work, timing=TEST_TIMING)
        # Workers read the repository through their own cache (as on another host).
        fleet.env["HEADWATER_GIT_CACHE_DIR"] = str(work / "worker-git-cache")
        fleet.start_fleet()
        env = {k: v for k, v in fleet.env.items() if k.startswith("HEADWATER_")}
        env.update({"HEADWATER_DATABASE_URL": database, "HEADWATER_CONFIG_FILE": str(work / "headwater.toml"),
                    "HEADWATER_GIT_CACHE_DIR": str(work / "serve-git-cache"), "HANDBOOK_HOOK_SECRET": SECRET})
        server = ServeProcess(work, env)
        try:
            server.start()
            server.fleet, server.repo = fleet, repo
            yield server
        finally:
            server.stop()
            fleet.stop()


def run_ids(serve) -> list[str]:
    return [r["id"] for r in serve.api.get("/api/v1/runs", params={"source_id": "handbook", "limit": 100}).json()]


def push_and_wait(serve, before: str, after: str, **flags) -> dict:
    """Deliver a push, then wait for the run serve queued for it (the fleet's runs are made after the 202)."""
    known = set(run_ids(serve))
    body, headers = delivery(push_payload(serve.repo, before, after, **flags), SECRET)
    response = serve.anonymous.post("/webhooks/github", content=body, headers=headers)
    assert response.status_code == 202, response.text
    fresh: list[str] = []
    wait_until(lambda: fresh.extend(set(run_ids(serve)) - known) or fresh, 60, "the push's run")
    return serve.wait_for_run(fresh[0], 240)


@pytest.mark.timeout(900)
def test_pushes_through_the_fleet_add_modify_delete_rename_and_force_push(fleet_git_serve):
    serve, repo, fleet = fleet_git_serve, fleet_git_serve.repo, fleet_git_serve.fleet
    run = push_and_wait(serve, "0" * 40, repo.head())  # never synced: a full run at the pushed commit
    assert run["status"] == "complete" and run["kind"] == "full" and run["trigger"] == "webhook", run
    assert fleet.documents(COLLECTION) == set(repo.files())

    repo.write("docs/tuning.md", "# Tuning\n\nSPLADE trades recall for index size.\n")
    repo.write("README.md", "# Handbook\n\nRotate the Chroma token every week now.\n")
    repo.remove("docs/onboarding.md")
    repo.move("docs/backup.md", "ops/backup.md")
    before, after = repo.commit_and_push("four kinds of change")
    run = push_and_wait(serve, before, after)
    assert run["status"] == "complete" and run["kind"] == "live" and run["trigger"] == "webhook", run
    assert run["indexed"] == 3 and run["deleted"] == 2, run  # the rename is a delete and an upsert here
    assert fleet.documents(COLLECTION) == set(repo.files()) == {"README.md", "docs/tuning.md", "ops/backup.md"}
    readme = [m for _, m in fleet.records(COLLECTION).values() if m["uri"] == "README.md"]
    assert readme and all(m["commit"] == after and m["repository"] == "handbook" for m in readme)

    # Replayed: the second delivery is dropped at once; the first (a new id for an old push) finds its
    # commit already synced and queues nothing either. Pushes are handled in order, so once the force
    # push below has its run, these have been handled: exactly one run more.
    count = len(run_ids(serve))
    body, headers = delivery(push_payload(repo, before, after), SECRET, delivery_id="replayed-delivery")
    assert serve.anonymous.post("/webhooks/github", content=body, headers=headers).status_code == 202
    assert serve.anonymous.post("/webhooks/github", content=body, headers=headers).json()["status"] == "duplicate"
    wrong = delivery(push_payload(repo, before, after), OTHER_SECRET)
    assert serve.anonymous.post("/webhooks/github", content=wrong[0], headers=wrong[1]).status_code == 401

    repo.reset_hard(before)
    repo.write("docs/fixed.md", "# Fixed\n\nThe right change, force-pushed.\n")
    _, forced = repo.commit_and_push("rewritten", force=True)
    run = push_and_wait(serve, after, forced, forced=True)
    assert run["status"] == "complete" and run["kind"] == "full" and run["trigger"] == "webhook", run
    assert fleet.documents(COLLECTION) == set(repo.files())
    assert len(run_ids(serve)) == count + 1

    # The command line queues a full run of the declared source at the branch's newest commit.
    import json
    import subprocess
    import sys

    command = [sys.executable, "-m", "headwater.cli"]
    synced = subprocess.run([*command, "sync", "handbook", "--fleet", "--wait"], env=serve.env, cwd=serve.workdir,
                            capture_output=True, text=True, timeout=300)
    assert synced.returncode == 0, synced.stdout + synced.stderr
    status = subprocess.run([*command, "status", "--json", "--collection", COLLECTION], env=serve.env,
                            cwd=serve.workdir, capture_output=True, text=True, timeout=120)
    assert json.loads(status.stdout)["handbook"]["cursor"] == repo.head() == forced

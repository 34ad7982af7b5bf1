"""POST /webhooks/github against a real `headwater serve` (embedded mode): real git repositories on disk,
real HTTP deliveries in GitHub's payload format and headers, signed as GitHub signs them."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from tests.git_http import private_git_server
from tests.git_repos import Repository, delivery, git, ping_payload, push_payload
from tests.integration.http_harness import ServeProcess
from tests.services import wait_until

pytestmark = pytest.mark.integration

SECRET = "webhook-secret-of-the-handbook"
OTHER_SECRET = "webhook-secret-of-another-repository"


def git_source_toml(source_id: str, repo: Repository, secret_env: str, collection: str | None = None) -> str:
    extra = f'collection = "{collection}"\n' if collection else ""
    return (f'[[sources]]\nid = "{source_id}"\nkind = "git"\n{extra}'
            f'options = {{ url = "{repo.url}", branch = "main", webhook_secret_env = "{secret_env}" }}\n')


def seed(repo: Repository) -> None:
    repo.write("README.md", "# Handbook\n\nRotate the Chroma token every month.\n")
    repo.write("docs/backup.md", "# Backups\n\nRestore the vector store from the nightly snapshot.\n")
    repo.write("docs/onboarding.md", "# Onboarding\n\nNew engineers pair with a buddy in their first week.\n")
    repo.commit_and_push("seed")


@pytest.fixture(scope="module")
def git_serve(tmp_path_factory):
    work = tmp_path_factory.mktemp("git-serve")
    repo, other = Repository(work / "remotes", "handbook"), Repository(work / "remotes", "other")
    seed(repo)
    seed(other)
    (work / "headwater.toml").write_text(git_source_toml("handbook", repo, "HANDBOOK_HOOK_SECRET")
                                         + git_source_toml("other", other, "OTHER_HOOK_SECRET"), encoding="utf-8")
    server = ServeProcess(work, {"HEADWATER_CHROMA_PATH": str(work / "chroma"),
                                 "HEADWATER_CONFIG_FILE": str(work / "headwater.toml"),
                                 "HEADWATER_GIT_CACHE_DIR": str(work / "git-cache"),
                                 "HANDBOOK_HOOK_SECRET": SECRET, "OTHER_HOOK_SECRET": OTHER_SECRET})
    with server:
        server.repo, server.other = repo, other
        yield server


def post(serve, payload: dict, secret: str | None, event: str = "push", **options):  # noqa: ANN201
    body, headers = delivery(payload, secret, event, **options)
    return serve.anonymous.post("/webhooks/github", content=body, headers=headers)


def runs_of(serve, source_id: str) -> list[dict]:
    return serve.api.get("/api/v1/runs", params={"source_id": source_id, "limit": 100}).json()


def documents(serve, source_id: str) -> set[str]:
    return {d["uri"] for d in serve.api.get(f"/api/v1/sources/{source_id}/documents",
                                            params={"limit": 1000}).json()["documents"]}


def push_and_wait(serve, repo: Repository, before: str, after: str, **flags) -> dict:
    response = post(serve, push_payload(repo, before, after, **flags), SECRET)
    assert response.status_code == 202, response.text
    run_id = response.json()["sources"][0]["run_id"]
    return serve.wait_for_run(run_id, 240)


@pytest.mark.timeout(300)
def test_bad_missing_and_wrong_repository_signatures_are_rejected_with_nothing_queued(git_serve):
    serve = git_serve
    runs_before = len(runs_of(serve, "handbook")) + len(runs_of(serve, "other"))
    assert post(serve, ping_payload(serve.repo), SECRET, "ping").status_code == 200
    payload = push_payload(serve.repo, "0" * 40, serve.repo.head())
    missing = post(serve, payload, None)
    assert missing.status_code == 401 and "X-Hub-Signature-256" in missing.json()["detail"]
    assert post(serve, payload, "not-the-secret").status_code == 401
    assert post(serve, payload, None, signature="sha256=" + "0" * 64).status_code == 401
    assert post(serve, payload, None, signature="sha1=abc").status_code == 401
    # Signed with another followed repository's secret: GitHub would never send that.
    assert post(serve, payload, OTHER_SECRET).status_code == 401
    # A repository no source follows, whatever the secret: the same answer as a wrong signature, so a
    # caller without a secret cannot learn which repositories are followed (the log says which it was).
    stranger = push_payload(serve.repo, "0" * 40, serve.repo.head(), full_name="tests/stranger")
    stranger["repository"]["clone_url"] = "https://github.com/tests/stranger.git"
    unknown, wrong = post(serve, stranger, SECRET), post(serve, payload, "not-the-secret")
    assert unknown.status_code == wrong.status_code == 401
    assert unknown.json() == wrong.json()
    wait_until(lambda: "no git source follows repository 'tests/stranger'" in serve.log(), 30, "the refusal's log line")
    # A body altered after signing.
    body, headers = delivery(payload, SECRET)
    assert serve.anonymous.post("/webhooks/github", content=body.replace(b"main", b"mainx"),
                                headers=headers).status_code == 401
    too_large = serve.anonymous.post("/webhooks/github", content=b"x" * (26 * 1024 * 1024),
                                     headers={"Content-Type": "application/json", "X-Hub-Signature-256": "sha256=0"})
    assert too_large.status_code == 413
    assert len(runs_of(serve, "handbook")) + len(runs_of(serve, "other")) == runs_before
    assert SECRET not in serve.log() and OTHER_SECRET not in serve.log()


@pytest.mark.timeout(600)
def test_pushes_are_synced_replays_and_other_refs_ignored_force_push_reconciled(git_serve):
    serve, repo = git_serve, git_serve.repo
    # The source was never synced: its first push reconciles the whole branch.
    run = push_and_wait(serve, repo, "0" * 40, repo.head())
    assert run["status"] == "complete" and run["kind"] == "push" and run["trigger"] == "webhook", run
    assert documents(serve, "handbook") == set(repo.files())

    repo.write("docs/tuning.md", "# Tuning\n\nSPLADE trades recall for index size.\n")  # add
    repo.write("README.md", "# Handbook\n\nRotate the Chroma token every week now.\n")  # modify
    repo.remove("docs/onboarding.md")  # delete
    repo.move("docs/backup.md", "ops/backup.md")  # rename
    before, after = repo.commit_and_push("four kinds of change")
    payload = push_payload(repo, before, after)
    body, headers = delivery(payload, SECRET)
    first = serve.anonymous.post("/webhooks/github", content=body, headers=headers)
    assert first.status_code == 202, first.text
    run = serve.wait_for_run(first.json()["sources"][0]["run_id"], 240)
    assert run["status"] == "complete" and run["indexed"] == 3 and run["deleted"] == 1, run
    assert documents(serve, "handbook") == set(repo.files()) == {"README.md", "docs/tuning.md", "ops/backup.md"}
    hits = serve.api.get("/api/v1/search", params={"q": "how often to rotate the Chroma token", "k": 1,
                                                   "source_id": "handbook", "group_by": "chunk"}).json()
    assert hits[0]["uri"] == "README.md" and hits[0]["metadata"]["commit"] == after, hits

    # A redelivery (same X-GitHub-Delivery) or a replay of the same bytes does nothing.
    count = len(runs_of(serve, "handbook"))
    again = serve.anonymous.post("/webhooks/github", content=body, headers=headers)
    assert again.status_code == 200 and again.json()["status"] == "duplicate"
    # Tags, other branches and other events are acknowledged and ignored.
    assert post(serve, push_payload(repo, "0" * 40, after, ref="refs/tags/v1.0"), SECRET).json()["status"] == "ignored"
    assert post(serve, push_payload(repo, "0" * 40, after, ref="refs/heads/feature"), SECRET).json()["status"] == "ignored"
    assert post(serve, {"action": "opened", "repository": payload["repository"]}, SECRET,
                "pull_request").json()["status"] == "ignored"
    assert len(runs_of(serve, "handbook")) == count

    # A force push rewrites history: the collection is reconciled with the new branch.
    repo.reset_hard(before)
    repo.write("docs/fixed.md", "# Fixed\n\nThe right change, force-pushed.\n")
    _, forced = repo.commit_and_push("rewritten", force=True)
    run = push_and_wait(serve, repo, after, forced, forced=True)
    assert run["status"] == "complete", run
    held = {d["uri"] for d in serve.api.get("/api/v1/sources/handbook/documents").json()["documents"]}
    assert held == set(repo.files()) == {"README.md", "docs/backup.md", "docs/onboarding.md", "docs/fixed.md"}


# A repository served over HTTP through a gate the test controls: held, failing, or open ------------

GATED_TOKEN = "gated-repository-token-0123456789"


class Gate:
    """What the gated repository's server does with each request: serve it, hold it until opened, or fail it."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.opened.set()
        self.held = threading.Event()  # set once a request waits at the closed gate
        self.failing = False

    def __call__(self) -> int | None:
        if self.failing:
            return 503
        if not self.opened.is_set():
            self.held.set()
            if not self.opened.wait(120):  # bounded: a test that never opens the gate fails, never hangs
                return 503
        return None

    def close(self) -> None:
        self.held.clear()
        self.opened.clear()


@pytest.fixture(scope="module")
def gated_serve(tmp_path_factory):
    """Embedded serve following one repository served by `git http-backend` behind a Gate; synced once."""
    work = tmp_path_factory.mktemp("git-serve-gated")
    repo = Repository(work / "remotes", "gated")
    seed(repo)
    gate = Gate()
    with private_git_server(work / "remotes", GATED_TOKEN, gate) as (base, _):
        url = f"{base}/gated.git"
        (work / "headwater.toml").write_text(
            f'[[sources]]\nid = "gated"\nkind = "git"\noptions = {{ url = "{url}", branch = "main", '
            'webhook_secret_env = "GATED_HOOK_SECRET", token_env = "GATED_GIT_TOKEN" }\n', encoding="utf-8")
        server = ServeProcess(work, {"HEADWATER_CHROMA_PATH": str(work / "chroma"),
                                     "HEADWATER_CONFIG_FILE": str(work / "headwater.toml"),
                                     "HEADWATER_GIT_CACHE_DIR": str(work / "git-cache"),
                                     "GATED_HOOK_SECRET": SECRET, "GATED_GIT_TOKEN": GATED_TOKEN})
        with server:
            server.repo, server.gate, server.repo_url = repo, gate, url
            run = server.wait_for_run(gated_post(server, "0" * 40, repo.head()).json()["sources"][0]["run_id"], 240)
            assert run["status"] == "complete", run
            yield server


def gated_delivery(serve, before: str, after: str, **flags) -> tuple[bytes, dict[str, str]]:
    payload = push_payload(serve.repo, before, after, **flags)
    payload["repository"]["clone_url"] = serve.repo_url
    return delivery(payload, SECRET)


def gated_post(serve, before: str, after: str, **flags):  # noqa: ANN201
    body, headers = gated_delivery(serve, before, after, **flags)
    return serve.anonymous.post("/webhooks/github", content=body, headers=headers)


@pytest.mark.timeout(300)
def test_a_push_is_answered_while_its_fetch_is_still_held(gated_serve):
    # "Answers 202 at once", by construction rather than by a clock: the repository does not answer
    # the push's fetch until the 202 is in hand.
    serve, repo, gate = gated_serve, gated_serve.repo, gated_serve.gate
    repo.write("docs/held.md", "# Held fetches\n\nThis page waits at the gate until the test opens it.\n")
    before, after = repo.commit_and_push("a push whose fetch is held")
    gate.close()
    try:
        response = gated_post(serve, before, after)
        assert response.status_code == 202, response.text
        assert not gate.opened.is_set()
        assert gate.held.wait(60), "the push's fetch never reached the repository"
        run_id = response.json()["sources"][0]["run_id"]
        run = serve.api.get(f"/api/v1/runs/{run_id}").json()
        assert not run["finished"], run  # still waiting on its fetch
    finally:
        gate.opened.set()
    run = serve.wait_for_run(run_id, 240)
    assert run["status"] == "complete" and run["indexed"] == 1, run
    hits = serve.api.get("/api/v1/search", params={"q": "a page that waits at the gate", "k": 1,
                                                   "source_id": "gated", "group_by": "chunk"}).json()
    assert hits and hits[0]["uri"] == "docs/held.md" and hits[0]["metadata"]["commit"] == after, hits


@pytest.mark.timeout(300)
def test_a_push_that_failed_is_taken_again_when_github_redelivers_it(gated_serve):
    serve, repo, gate = gated_serve, gated_serve.repo, gated_serve.gate
    repo.write("docs/redelivered.md", "# Redelivered\n\nA push whose first fetch failed, taken again.\n")
    before, after = repo.commit_and_push("a push whose first fetch fails")
    body, headers = gated_delivery(serve, before, after)
    gate.failing = True
    try:
        first = serve.anonymous.post("/webhooks/github", content=body, headers=headers)
        assert first.status_code == 202, first.text
        run = serve.wait_for_run(first.json()["sources"][0]["run_id"], 240)
        assert run["status"] == "failed", run
    finally:
        gate.failing = False
    # GitHub's redelivery: the same X-GitHub-Delivery id, taken (not a duplicate) because the push failed.
    again = serve.anonymous.post("/webhooks/github", content=body, headers=headers)
    assert again.status_code == 202 and again.json()["status"] == "queued", again.text
    run = serve.wait_for_run(again.json()["sources"][0]["run_id"], 240)
    assert run["status"] == "complete" and run["indexed"] == 1, run
    assert "docs/redelivered.md" in documents(serve, "gated")
    # Once applied, the id is remembered.
    third = serve.anonymous.post("/webhooks/github", content=body, headers=headers)
    assert third.status_code == 200 and third.json()["status"] == "duplicate"
    assert GATED_TOKEN not in serve.log() and SECRET not in serve.log()


@pytest.mark.timeout(300)
def test_deleting_the_branch_keeps_the_collection_and_marks_the_source(gated_serve):
    serve, repo = gated_serve, gated_serve.repo

    def status() -> dict:
        done = subprocess.run([sys.executable, "-m", "headwater.cli", "status", "--json"], env=serve.env,
                              cwd=serve.workdir, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout)["gated"]

    head, held, before = repo.head(), documents(serve, "gated"), status()
    assert held and before["cursor"] and not before["note"], before
    git(repo.bare, "update-ref", "-d", "refs/heads/main")  # the branch is really gone from the remote
    try:
        response = gated_post(serve, head, "0" * 40, deleted=True)
        assert response.status_code == 202, response.text
        run = serve.wait_for_run(response.json()["sources"][0]["run_id"], 240)
        assert run["status"] == "complete" and run["deleted"] == 0, run
        assert documents(serve, "gated") == held
        shown = status()
        assert shown["cursor"] == before["cursor"] and "deleted" in shown["note"], shown
        assert shown["documents"] == before["documents"] == len(held) and shown["chunks"] == before["chunks"]
    finally:
        git(repo.bare, "update-ref", "refs/heads/main", head)

"""Git sources in-process: real repositories on disk (a bare remote fetched by file:// URL), the real
engine and models, and pushes planned and applied as serve applies them in embedded mode."""

from __future__ import annotations

import pytest

from connectors.git import GitConnector
from headwater.sync.git_pushes import Push, plan_push, sync_push_embedded
from headwater.ids import bytes_hash
from headwater.store.source_cursors import CursorStore
from headwater.store.source_store import SourceStore
from tests.git_repos import Repository, git

pytestmark = pytest.mark.integration

APP = '''def hello(name):
    """Say hello to someone by name."""
    return f"hello {name}"


class Greeter:
    def greet(self):
        return hello("world")
'''


def seeded(tmp_path) -> Repository:
    repo = Repository(tmp_path / "remote")
    repo.write("README.md", "# Handbook\n\nRotate the Chroma token every month.\n")
    repo.write("src/app.py", APP)
    repo.write("docs/backup.md", "# Backups\n\nRestore the vector store from the nightly snapshot.\n")
    repo.write("docs/onboarding.md", "# Onboarding\n\nNew engineers pair with a buddy in their first week.\n")
    repo.commit_and_push("seed")
    return repo


def connector_for(repo: Repository, tmp_path, **options) -> GitConnector:
    return GitConnector("handbook", repo.url, branch="main", cache_dir=tmp_path / "git-cache",
                        webhook_secret_env=None, **options)


def indexed(harness) -> dict[str, str]:
    """uri -> doc_hash of what the collection holds for the source."""
    return {uri: doc.doc_hash for uri, doc in harness.store.documents("handbook").items()}


def expected(repo: Repository) -> dict[str, str]:
    return {path: bytes_hash(data) for path, data in repo.files().items()}


@pytest.fixture
def cursors(tmp_path) -> CursorStore:
    return CursorStore(SourceStore(f"sqlite:///{tmp_path / 'sources.sqlite3'}"))


@pytest.mark.timeout(300)
def test_full_sync_reads_text_files_with_git_metadata_and_skips_the_rest_with_reasons(tmp_path, make_harness):
    repo = seeded(tmp_path)
    repo.write("assets/logo.bin", b"\x89PNG\x00\x00binary")
    repo.write("vendor/lib/left_pad.js", "module.exports = (s) => s;\n")
    repo.write("data/huge.txt", "x" * 3000 + "\n")
    _, commit = repo.commit_and_push("more")
    harness = make_harness(tmp_path)
    connector = connector_for(repo, tmp_path, max_file_kb=2, web_url="https://github.example/tests/handbook")
    report = harness.engine.sync(connector)
    assert report.added == 4 and report.failed == {}, report
    assert "binary" in report.skipped["assets/logo.bin"]
    assert "vendored" in report.skipped["vendor/lib/left_pad.js"]
    assert "max_file_kb" in report.skipped["data/huge.txt"]
    assert connector.cursor == commit
    # The listing carries each blob's size (fleet runs admit their largest documents first).
    sizes = {c.uri: c.size for c in connector_for(repo, tmp_path).list_documents()}
    assert sizes == {path: len(data) for path, data in repo.files().items()}
    records = harness.records()["src/app.py"]
    metadata = next(iter(records.values()))
    assert metadata["repository"] == "handbook" and metadata["commit"] == commit and metadata["branch"] == "main"
    assert metadata["language"] == "python" and metadata["line_start"] == 1 and metadata["line_end"] >= 8
    assert metadata["url"] == f"https://github.example/tests/handbook/blob/{commit}/src/app.py"
    assert metadata["doc_version"] == git(repo.bare, "rev-parse", "main:src/app.py")  # the blob id
    # An unchanged re-sync reads nothing: every version (blob id) matches.
    again = harness.engine.sync(connector_for(repo, tmp_path, max_file_kb=2))
    assert again.unchanged == 4 and again.added == again.updated == 0 and again.chunks_embedded == 0


@pytest.mark.timeout(300)
def test_pushes_add_modify_delete_and_rename_as_live_changes(tmp_path, make_harness, cursors):
    repo = seeded(tmp_path)
    harness = make_harness(tmp_path)
    first = harness.engine  # the engine serve would use
    before, after = "0" * 40, repo.head()
    report = sync_push_embedded(first, connector_for(repo, tmp_path), cursors, Push("handbook", before, after))
    assert report.added == 4  # a source never synced is reconciled in full
    assert cursors.get("handbook").cursor == after and indexed(harness) == expected(repo)

    repo.write("docs/tuning.md", "# Tuning\n\nSPLADE trades recall for index size.\n")  # add
    repo.write("README.md", "# Handbook\n\nRotate the Chroma token every week now.\n")  # modify
    repo.remove("docs/onboarding.md")  # delete
    repo.move("docs/backup.md", "ops/backup.md")  # rename
    before, after = repo.commit_and_push("four kinds of change")
    connector = connector_for(repo, tmp_path)
    plan = plan_push(connector, cursors.get("handbook").cursor, Push("handbook", before, after))
    assert plan.kind == "incremental", plan.reason
    assert {(c.uri, c.op.value) for c in plan.changes} == {
        ("docs/tuning.md", "upsert"), ("README.md", "upsert"), ("docs/onboarding.md", "delete"),
        ("docs/backup.md", "delete"), ("ops/backup.md", "upsert")}
    report = sync_push_embedded(first, connector, cursors, Push("handbook", before, after))
    assert (report.added, report.updated, report.deleted, report.moved) == (1, 1, 1, 1), report
    assert indexed(harness) == expected(repo) and cursors.get("handbook").cursor == after
    commits = {m["commit"] for records in harness.records().values() for m in records.values()}
    assert after in commits  # changed files carry the pushed commit; unchanged ones keep theirs


@pytest.mark.timeout(300)
def test_force_push_out_of_order_and_late_pushes_reconcile(tmp_path, make_harness, cursors):
    repo = seeded(tmp_path)
    harness = make_harness(tmp_path)
    engine = harness.engine
    seed = repo.head()
    sync_push_embedded(engine, connector_for(repo, tmp_path), cursors, Push("handbook", "0" * 40, seed))
    repo.write("docs/mistake.md", "# Mistake\n\nThis commit will be force-pushed away.\n")
    before, mistake = repo.commit_and_push("mistake")
    sync_push_embedded(engine, connector_for(repo, tmp_path), cursors, Push("handbook", before, mistake))
    assert "docs/mistake.md" in indexed(harness)

    repo.reset_hard(seed)  # rewrite history: the mistake is gone, another change replaces it
    repo.write("docs/fixed.md", "# Fixed\n\nThe right change, force-pushed.\n")
    _, fixed = repo.commit_and_push("fixed", force=True)
    push = Push("handbook", mistake, fixed, forced=True)
    plan = plan_push(connector_for(repo, tmp_path), cursors.get("handbook").cursor, push)
    assert plan.kind == "full" and "forced" in plan.reason
    report = sync_push_embedded(engine, connector_for(repo, tmp_path), cursors, push)
    assert report.deleted == 1 and report.added == 1
    assert indexed(harness) == expected(repo) and cursors.get("handbook").cursor == fixed

    # Two pushes, delivered in the wrong order: the later one reconciles, the earlier one then does nothing.
    repo.write("docs/one.md", "# One\n\nFirst of two quick pushes.\n")
    first_before, first_after = repo.commit_and_push("one")
    repo.write("docs/two.md", "# Two\n\nSecond of two quick pushes.\n")
    second_before, second_after = repo.commit_and_push("two")
    late = plan_push(connector_for(repo, tmp_path), fixed, Push("handbook", second_before, second_after))
    assert late.kind == "full" and "out of order" in late.reason
    sync_push_embedded(engine, connector_for(repo, tmp_path), cursors, Push("handbook", second_before, second_after))
    assert sync_push_embedded(engine, connector_for(repo, tmp_path), cursors,
                              Push("handbook", first_before, first_after)) is None
    assert indexed(harness) == expected(repo) and cursors.get("handbook").cursor == second_after

    # Deleting the branch keeps the collection and marks the source.
    assert sync_push_embedded(engine, connector_for(repo, tmp_path), cursors,
                              Push("handbook", second_after, "0" * 40, deleted=True)) is None
    assert indexed(harness) == expected(repo)
    row = cursors.get("handbook")
    assert row.cursor == second_after and "deleted" in row.note


@pytest.mark.timeout(600)
def test_a_push_of_a_thousand_files_is_written_in_bounded_batches(tmp_path, make_harness, cursors):
    repo = seeded(tmp_path)
    harness = make_harness(tmp_path, upsert_batch_size=300)
    engine = harness.engine
    sync_push_embedded(engine, connector_for(repo, tmp_path), cursors, Push("handbook", "0" * 40, repo.head()))
    for i in range(1000):
        repo.write(f"notes/{i // 100:02}/note-{i:04}.md", f"# Note {i}\n\nShort note number {i} about topic {i % 37}.\n")
    before, after = repo.commit_and_push("a thousand notes")
    harness.writes.clear()
    report = sync_push_embedded(engine, connector_for(repo, tmp_path), cursors, Push("handbook", before, after))
    assert report.added == 1000 and report.failed == {}, report
    assert max(size for _, size in harness.writes) <= 300, harness.writes
    assert indexed(harness) == expected(repo)


@pytest.mark.timeout(300)
def test_a_private_repository_over_http_with_a_token_that_never_leaks(tmp_path, make_harness, monkeypatch, caplog):
    from headwater.errors import ListingError
    from tests.git_http import private_git_server

    token = "ghp_TestTokenNeverLogged0123456789"
    repo = seeded(tmp_path)
    git(repo.bare, "config", "http.receivepack", "false")
    git(repo.bare, "config", "uploadpack.allowFilter", "true")
    monkeypatch.setenv("HW_TEST_GIT_TOKEN", token)
    with private_git_server(repo.bare.parent, token) as (base, seen):
        url = f"{base}/{repo.bare.name}"
        without = GitConnector("private", url, cache_dir=tmp_path / "cache-none")
        with pytest.raises(ListingError) as refused:
            list(without.list_documents())
        assert "token_env" in str(refused.value)
        connector = GitConnector("private", url, token_env="HW_TEST_GIT_TOKEN", cache_dir=tmp_path / "cache")
        report = make_harness(tmp_path).engine.sync(connector)
        assert report.added == 4 and report.failed == {}, report
    assert any(header.startswith("Basic ") for header in seen)
    stored = "".join(p.read_text(errors="replace") for p in (tmp_path / "cache").rglob("*") if p.is_file()
                     and p.stat().st_size < 1_000_000 and "objects" not in p.parts)
    assert token not in stored and token not in str(connector.spec()) and token not in caplog.text


@pytest.mark.timeout(300)
def test_the_command_line_syncs_a_git_url_and_status_shows_the_synced_commit(tmp_path):
    import json
    import os
    import subprocess
    import sys

    repo = seeded(tmp_path)
    env = {**os.environ, "HEADWATER_CHROMA_PATH": str(tmp_path / "chroma"), "HEADWATER_GIT_CACHE_DIR":
           str(tmp_path / "cache"), "HEADWATER_CONFIG_FILE": str(tmp_path / "none.toml"), "COLUMNS": "200"}
    target = f"git+{repo.url}#main"
    synced = subprocess.run([sys.executable, "-m", "headwater.cli", "sync", target], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=240)
    assert synced.returncode == 0, synced.stderr
    status = subprocess.run([sys.executable, "-m", "headwater.cli", "status", "--json"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)[target] == {"documents": 4, "chunks": 4, "cursor": repo.head(), "note": ""}
    missing = subprocess.run([sys.executable, "-m", "headwater.cli", "sync", f"git+{repo.url}#nope"], env=env,
                             cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert missing.returncode == 1 and "branch nope does not exist" in missing.stderr

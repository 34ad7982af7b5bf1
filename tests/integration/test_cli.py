"""The `headwater` command as a user runs it (a real process each time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from headwater.path_lock import ChromaPathLock

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
HEADWATER = [sys.executable, "-m", "headwater.cli"]


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*HEADWATER, *args], capture_output=True, text=True, timeout=240, cwd=cwd,
                          env={**os.environ, "COLUMNS": "200"})


def test_sync_query_status_and_partial_failure(sample, tmp_path):
    (sample / "broken.pdf").write_bytes(b"%PDF-1.4 this is not really a PDF")
    synced = _run("sync", str(sample), "--chroma-path", "store", cwd=tmp_path)
    assert synced.returncode == 2, synced.stderr[-2000:]  # some failed, the rest indexed
    assert "broken.pdf" in synced.stdout and "Failed" in synced.stdout
    assert "added" in synced.stdout

    found = _run("query", "how do I rotate the chroma token", "--chroma-path", "store", "-k", "3", "--json",
                 cwd=tmp_path)
    assert found.returncode == 0, found.stderr[-2000:]
    hits = json.loads(found.stdout)
    assert len(hits) == 3 and {"id", "uri", "text", "score", "metadata"} <= set(hits[0])
    assert hits[0]["uri"] == "ops/runbook.md" and "sparse_vector" not in hits[0]["metadata"]

    status = _run("status", "--chroma-path", "store", "--json", cwd=tmp_path)
    counts = json.loads(status.stdout)[str(sample.resolve())]
    assert counts["documents"] == len([p for p in sample.rglob("*") if p.is_file()]) - 1


def test_a_second_writer_gets_a_clear_error(sample, tmp_path):
    with ChromaPathLock(tmp_path / "store"):
        result = _run("sync", str(sample), "--chroma-path", "store", cwd=tmp_path)
    assert result.returncode == 1
    assert "being written by another Headwater process" in result.stderr


def test_query_before_any_sync_says_what_to_do(tmp_path):
    result = _run("query", "anything", "--chroma-path", "empty", cwd=tmp_path)
    assert result.returncode == 1 and "run `headwater sync` first" in result.stderr


def test_query_modes_filters_and_reindex(sample, tmp_path):
    assert _run("sync", str(sample), "--chroma-path", "store", cwd=tmp_path).returncode == 0
    sparse = _run("query", "rotate the chroma token", "--chroma-path", "store", "--mode", "sparse",
                  "--uri-prefix", "ops", "--json", cwd=tmp_path)
    hits = json.loads(sparse.stdout)
    assert hits and all(h["uri"].startswith("ops/") and h["sparse_rank"] and h["dense_rank"] is None for h in hits)

    bad = _run("query", "anything", "--chroma-path", "store", "--where", "{not json", cwd=tmp_path)
    assert bad.returncode == 1 and "--where is not valid JSON" in bad.stderr

    rebuilt = _run("reindex", "--chroma-path", "store", cwd=tmp_path)
    assert rebuilt.returncode == 0 and "rebuilt the sparse index" in rebuilt.stdout
    hybrid = _run("query", "rotate the chroma token", "--chroma-path", "store", "--json", cwd=tmp_path)
    assert json.loads(hybrid.stdout)[0]["uri"] == "ops/runbook.md"


def test_newcomer_mistakes_get_exit_1_and_create_nothing(tmp_path):
    missing = _run("sync", str(tmp_path / "no-such-folder"), "--chroma-path", "store", cwd=tmp_path)
    assert missing.returncode == 1 and "neither a directory" in missing.stderr, missing.stderr[-2000:]
    typo = _run("query", "anything", "--chroma-path", "stroe", cwd=tmp_path)
    assert typo.returncode == 1 and "no embedded Chroma at stroe" in typo.stderr
    assert not (tmp_path / "stroe").exists()  # a mistyped path is not turned into an empty database


def test_library_warnings_stay_out_of_a_sync_unless_verbose(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "notes.md").write_text("# Notes\n\nA readable note about the release checklist, in full sentences.\n")
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 this is not really a PDF")
    quiet = _run("sync", str(folder), "--chroma-path", "store", cwd=tmp_path)
    assert quiet.returncode == 2 and "broken.pdf" in quiet.stdout
    assert "invalid pdf header" not in quiet.stderr.lower() and "EOF marker" not in quiet.stderr
    verbose = _run("--verbose", "sync", str(folder), "--chroma-path", "store", cwd=tmp_path)
    assert verbose.returncode == 2 and "EOF marker not found" in verbose.stderr


def test_work_that_needs_no_model_loads_none(tmp_path):
    """An unchanged re-sync loads no model; a dense query loads no SPLADE (each costs seconds at start)."""
    from connectors.folder import FolderConnector
    from headwater.embedded import open_engine
    from headwater.retrieval import open_searcher
    from headwater.settings import Settings

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# Release\n\nTag the release, then publish the notes for the on-call team.\n")
    settings = Settings(chroma_path=tmp_path / "store", collection="lazy")
    with open_engine(settings) as engine:
        assert engine.sync(FolderConnector("docs", folder)).chunks_embedded > 0
    with open_engine(settings) as engine:
        report = engine.sync(FolderConnector("docs", folder))
        assert report.unchanged == 1 and not engine.dense.loaded and not engine.sparse.loaded
    searcher = open_searcher(settings)
    assert searcher.search("publish release notes", k=1, mode="dense")[0].uri == "a.md"
    assert searcher.dense.loaded and not searcher.sparse.loaded

"""The `headwater` command as a user runs it (a real process each time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from headwater.store.path_lock import ChromaPathLock

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
    assert len(hits) == 3 and {"uri", "source_id", "score", "best_chunk", "matching_chunks", "other_chunks"} <= set(hits[0])
    assert len({h["uri"] for h in hits}) == 3  # k documents, each once
    assert hits[0]["uri"] == "ops/runbook.md" and "sparse_vector" not in hits[0]["best_chunk"]["metadata"]
    chunks = json.loads(_run("query", "how do I rotate the chroma token", "--chroma-path", "store", "-k", "3", "--json",
                             "--per-chunk", cwd=tmp_path).stdout)
    assert len(chunks) == 3 and {"id", "uri", "text", "score", "metadata"} <= set(chunks[0])

    shown = _run("query", "how do I rotate the chroma token", "--chroma-path", "store", "-k", "1", cwd=tmp_path)
    lines = shown.stdout.splitlines()
    # The chunk's context header on a line of its own, marked, and the chunk's text on the next.
    assert lines[0].startswith("1. ops/runbook.md") and lines[1].startswith("   › ops/runbook.md"), shown.stdout
    assert lines[2].startswith("   ") and not lines[2].lstrip().startswith(("›", "ops/runbook.md")), shown.stdout
    # auto says on stderr which mode it chose for this collection (the sample is prose: dense).
    assert "mode auto: dense (this collection is mostly prose" in shown.stderr, shown.stderr
    assert "mode auto" not in found.stderr  # --json output stays machine-readable and quiet

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
    from headwater.sync.embedded import open_engine
    from headwater.retrieval.searcher import open_searcher
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
    for searcher in (open_searcher(settings), open_searcher(settings, "dense")):  # lazily, and as the CLI opens it
        assert searcher.search("publish release notes", k=1, mode="dense")[0].uri == "a.md"
        assert searcher.dense.loaded and not searcher.sparse.loaded


def test_a_query_never_imports_chromas_python_client(sample, tmp_path):
    """`import chromadb` alone costs a one-off query over a second: the CLI reads through Chroma's engine."""
    assert _run("sync", str(sample), "--chroma-path", "store", cwd=tmp_path).returncode == 0
    for mode in ("hybrid", "dense"):
        found = subprocess.run([*HEADWATER, "query", "rotate the chroma token", "--chroma-path", "store", "--mode", mode,
                                "--json"], capture_output=True, text=True, timeout=240, cwd=tmp_path,
                               env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
        assert found.returncode == 0, found.stderr[-2000:]
        assert json.loads(found.stdout)[0]["uri"] == "ops/runbook.md"
        imported = {line.rsplit("|", 1)[-1].strip() for line in found.stderr.splitlines() if line.startswith("import time:")}
        assert "chromadb_rust_bindings" in imported and "onnxruntime" in imported  # the profile is real
        assert not {name for name in imported if name == "chromadb" or name.startswith("chromadb.")}, mode


def test_a_random_bytes_pdf_is_reported_as_not_a_pdf(tmp_path):
    import random

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "scan.pdf").write_bytes(random.Random(3).randbytes(5000).replace(b"%PDF-", b""))
    result = _run("sync", str(folder), "--chroma-path", "store", cwd=tmp_path)
    assert result.returncode == 2 and "not a PDF" in result.stdout, result.stdout[-2000:]
    assert "images" not in result.stdout


def test_help_shows_plain_flags_defaults_and_environment_variables(tmp_path):
    for command in ("query", "sync", "status"):
        shown = _run(command, "--help", cwd=tmp_path)
        assert shown.returncode == 0
        assert "<bool>" not in shown.stdout and "--json" in shown.stdout or command == "sync"
        text = " ".join(shown.stdout.split())  # help wraps lines
        assert "env var: HEADWATER_COLLECTION" in text and "default: (headwater)" in text
        assert "env var: HEADWATER_CHROMA_PATH" in text and "default: (.headwater/chroma)" in text


@pytest.fixture(scope="module")
def synced(tmp_path_factory) -> Path:
    """A small folder synced once, with progress drawn as on a terminal (stderr kept in progress.txt)."""
    root = tmp_path_factory.mktemp("synced")
    folder = root / "docs"
    folder.mkdir()
    (folder / "release.md").write_text("# Release\n\nTag the release, then publish the notes for the on-call team.\n")
    (folder / "tokens.md").write_text("# Tokens\n\nRotate the Chroma token every quarter and restart the workers.\n")
    result = subprocess.run([*HEADWATER, "sync", str(folder), "--chroma-path", "store"], capture_output=True,
                            text=True, timeout=240, cwd=root,
                            env={**os.environ, "COLUMNS": "120", "TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    (root / "progress.txt").write_text(result.stderr)
    return root


def test_progress_lists_then_counts_documents_against_their_total(synced):
    import re

    drawn = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", (synced / "progress.txt").read_text())
    lines = {line.strip() for line in re.split(r"[\r\n]", drawn) if line.strip()}
    documents = [line for line in lines if line.startswith("documents")]
    assert documents and all(re.search(r" [0-2]/2 ", line + " ") for line in documents), documents
    assert not any("0/0" in line or "/?" in line for line in lines)
    assert any(re.match(r"chunks embedded +\d+", line) for line in lines)


def _imported(stderr: str) -> set[str]:
    """Modules named by `python -X importtime`."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.parametrize("mode", ["hybrid", "dense"])
def test_a_query_imports_no_framework(synced, mode):
    """No torch, transformers, unstructured or celery on the query path: a query starts in about a second."""
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "headwater.cli", "query", "rotate the token",
                             "--chroma-path", "store", "--mode", mode, "--json"], capture_output=True, text=True,
                            timeout=240, cwd=synced)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout)[0]["uri"] == "tokens.md"
    roots = {name.split(".")[0] for name in _imported(result.stderr)}
    assert not roots & {"torch", "transformers", "unstructured", "celery", "spacy"}


def test_a_missing_onnx_export_is_made_on_first_use_and_said(synced, tmp_path):
    env = {**os.environ, "HEADWATER_ONNX_CACHE_DIR": str(tmp_path / "onnx")}
    query = [*HEADWATER, "query", "rotate the token", "--chroma-path", "store", "--mode", "sparse", "--json"]
    first = subprocess.run(query, capture_output=True, text=True, timeout=240, cwd=synced, env=env)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "exporting SPLADE model" in first.stderr and "`headwater doctor` does this at install time" in first.stderr
    assert json.loads(first.stdout)[0]["uri"] == "tokens.md"
    assert len(list((tmp_path / "onnx").glob("splade-tiny-*/model.onnx"))) == 1
    again = subprocess.run(query, capture_output=True, text=True, timeout=240, cwd=synced, env=env)
    assert again.returncode == 0 and "exporting" not in again.stderr


def test_a_wrong_command_line_exits_64_never_2(tmp_path):
    """2 means "a sync ran, some documents failed": a script must tell that apart from a command called wrong."""
    for args in (["sync"], ["query", "anything", "--no-such-option"], ["query", "anything", "-k", "0"],
                 ["no-such-command"]):
        result = _run(*args, cwd=tmp_path)
        assert result.returncode == 64, (args, result.returncode, result.stderr[-1000:])
        assert "Usage:" in result.stderr
    assert "Missing argument 'PATH'" in _run("sync", cwd=tmp_path).stderr
    shown = _run("--help", cwd=tmp_path)
    assert shown.returncode == 0 and "64 the command line is wrong" in " ".join(shown.stdout.split())


def test_help_placeholders_read_like_words(tmp_path):
    """`--include GLOB`, `sync [OPTIONS] PATH`: never a type such as <str>, <list[str]> or {path}."""
    import re

    from typer.main import get_command

    from headwater.cli.app import app

    for name in get_command(app).commands:
        shown = _run(name, "--help", cwd=tmp_path)
        assert shown.returncode == 0, name
        assert not re.search(r"<[a-z][\w\[\] ,|]*>|\{\w+\}", shown.stdout), (name, shown.stdout)
    text = " ".join(_run("sync", "--help", cwd=tmp_path).stdout.split())
    assert "sync [OPTIONS] PATH" in text and "--include GLOB" in text and "--chroma-path PATH" in text
    assert "-k N" in _run("query", "--help", cwd=tmp_path).stdout


def test_doctor_makes_the_export_without_a_warning_and_keeps_paths_whole_when_piped(tmp_path):
    """Piped (no terminal, so rich would wrap at 80 columns), each check stays on one line with its whole path;
    the SPLADE export doctor makes is its job, not a first-use surprise to warn about."""
    cache = tmp_path / "a-directory-whose-name-is-long-enough-to-push-any-path-in-it-past-eighty-columns" / "onnx"
    env = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "TTY_COMPATIBLE")}
    env["HEADWATER_ONNX_CACHE_DIR"] = str(cache)
    done = subprocess.run([*HEADWATER, "doctor"], capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    export = next(cache.glob("splade-tiny-*/model.onnx"))
    assert len(str(export)) > 80
    lines = done.stdout.splitlines()
    assert all(line.startswith("ok ") for line in lines), lines
    assert any(line.startswith("ok sparse model:") and str(export) in line for line in lines), lines
    assert "exporting SPLADE" not in done.stderr and "WARNING" not in done.stderr, done.stderr[-2000:]

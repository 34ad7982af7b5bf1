"""Every embedded writer consolidates after a pass that wrote: `headwater watch` and embedded `headwater
serve`, as real processes on a real embedded Chroma directory (`headwater sync` is covered in
test_consolidation.py; the fleet's trigger in test_consolidation_fleet.py).

Two copies of one document are the input: stage 1 settles copies without an LLM, so a pass writes one
knowledge record with no model to answer (the endpoint configured is one nobody listens on).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from headwater.consolidation import knowledge as kn
from tests.consolidation_corpus import VPN
from tests.integration.http_harness import ServeProcess
from tests.services import stop_process_group, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

CONSOLIDATE_AFTER_WRITES = {"HEADWATER_CONSOLIDATE_AFTER_SYNC": "true",
                            "HEADWATER_CONSOLIDATE_LLM_URL": "http://127.0.0.1:9/v1",
                            "HEADWATER_CONSOLIDATE_LLM_RETRIES": "0"}


def _knowledge(chroma_path: Path, collection: str) -> set[tuple[str, ...]]:
    """The uris behind each knowledge record of the collection (read once no writer holds the directory)."""
    import chromadb

    client = chromadb.PersistentClient(path=str(chroma_path))
    try:
        got = client.get_collection(collection + "__knowledge").get(include=["metadatas"])
    except Exception:  # noqa: BLE001  (no pass has created it)
        return set()
    return {tuple(sorted(m[kn.URIS])) for m in got["metadatas"]}


def test_watch_consolidates_after_each_pass_that_wrote(tmp_path):
    docs = tmp_path / "docs"
    (docs / "it").mkdir(parents=True)
    (docs / "handbook.md").write_text(VPN, encoding="utf-8")
    log_path = tmp_path / "watch.log"
    env = {**os.environ, "COLUMNS": "250", **CONSOLIDATE_AFTER_WRITES}
    with open(log_path, "wb") as log:
        watch = subprocess.Popen([sys.executable, "-m", "headwater.cli", "watch", str(docs), "--chroma-path",
                                  str(tmp_path / "store"), "--collection", "watched"],
                                 cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def output() -> str:
            assert watch.poll() is None, f"watch exited with {watch.returncode}: {log_path.read_text()[-3000:]}"
            return log_path.read_text(errors="replace")

        # The first pass wrote one document: a pass ran, with nothing to consolidate yet.
        wait_until(lambda: "watching" in output(), 180, "the watch's first pass")
        assert "consolidated: 0 knowledge records written" in output(), output()[-3000:]

        # A copy arrives while watching: the pass that indexes it is followed by a consolidation pass.
        (docs / "it" / "vpn-setup.md").write_text(VPN, encoding="utf-8")
        wait_until(lambda: "consolidated: 1 knowledge records written" in output(), 120,
                   "a consolidation pass after the watched write")

        # The copy goes away: the pass that deletes it removes the knowledge it backed.
        (docs / "it" / "vpn-setup.md").unlink()
        wait_until(lambda: "consolidated: 0 knowledge records written, 1 removed" in output(), 120,
                   "a consolidation pass after the watched delete")
        (docs / "it" / "copy.md").write_text(VPN, encoding="utf-8")
        wait_until(lambda: output().count("consolidated: 1 knowledge records written") == 2, 120,
                   "a consolidation pass after the second copy")
    finally:
        if watch.poll() is None:
            stop_process_group(watch, signal.SIGINT, seconds=30)
    assert watch.returncode == 0, log_path.read_text()[-3000:]
    assert _knowledge(tmp_path / "store", "watched") == {("handbook.md", "it/copy.md")}


def test_embedded_serve_consolidates_after_a_run_that_wrote(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "handbook.md").write_text(VPN, encoding="utf-8")
    (docs / "vpn-setup.md").write_text(VPN, encoding="utf-8")
    server = ServeProcess(tmp_path, {"HEADWATER_CHROMA_PATH": str(tmp_path / "store"), "HEADWATER_COLLECTION": "served",
                                     "HEADWATER_FOLDER_ROOTS": json.dumps([str(tmp_path)]), **CONSOLIDATE_AFTER_WRITES})
    with server:
        created = server.api.post("/api/v1/sources", json={"id": "docs", "kind": "folder", "options": {"path": str(docs)}})
        assert created.status_code == 201, created.text

        def knowledge() -> set[tuple[str, ...]]:
            view = server.api.get("/api/v1/knowledge", params={"collection": "served"}).raise_for_status().json()
            return {tuple(sorted(r["uris"])) for r in view["records"]}

        def run() -> dict:
            started = server.api.post("/api/v1/sources/docs/runs")
            assert started.status_code == 202, started.text
            return server.wait_for_run(started.json()["run_id"], 180)

        assert run()["status"] == "complete"
        # The pass runs on the sync thread right after the run is recorded.
        wait_until(lambda: knowledge() == {("handbook.md", "vpn-setup.md")}, 60, "the knowledge after the first run")

        (docs / "vpn-setup.md").unlink()
        done = run()
        assert done["status"] == "complete" and done["deleted"] == 1, done
        wait_until(lambda: knowledge() == set(), 60, "the knowledge without the deleted copy")
        assert "consolidation after run" not in server.log()  # no pass failed
    # The serve process has stopped and released the directory: the knowledge is on disk too.
    assert _knowledge(tmp_path / "store", "served") == set()

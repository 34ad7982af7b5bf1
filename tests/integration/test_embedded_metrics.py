"""`headwater serve` in embedded mode: its /metrics and logs cover the syncs it runs in-process."""

from __future__ import annotations

import json

import pytest

from tests.integration.http_harness import ServeProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_an_in_process_sync_shows_in_metrics_and_json_logs(tmp_path):
    folder = tmp_path / "handbook"
    folder.mkdir()
    for i in range(3):
        (folder / f"note-{i}.md").write_text(f"# Note {i}\n\nHow to rotate token number {i}.\n")
    with ServeProcess(tmp_path, {"HEADWATER_CHROMA_PATH": str(tmp_path / "chroma"), "HEADWATER_LOG_FORMAT": "json",
                                 "HEADWATER_FOLDER_ROOTS": json.dumps([str(tmp_path)])}) as serve:
        created = serve.api.post("/api/v1/sources", json={"id": "handbook", "kind": "folder",
                                                          "options": {"path": str(folder)}})
        assert created.status_code in (200, 201), created.text
        run = serve.wait_for_run(serve.api.post("/api/v1/sources/handbook/runs").json()["run_id"])
        assert run["status"] == "complete", run
        metrics = serve.api.get("/metrics").text
        log = serve.log()
    assert 'headwater_documents_total{outcome="indexed",stage="sync"} 3.0' in metrics
    assert 'headwater_chunks_total{outcome="embedded",stage="sync"}' in metrics
    assert 'headwater_stage_seconds_count{stage="sync"} 1.0' in metrics
    assert 'headwater_upsert_batch_size_count' in metrics and "headwater_queue_depth" in metrics
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert lines and all(line["component"] == "serve" for line in lines)

"""Bad documents are reported with a reason and isolated: the rest is indexed, nothing indexed is lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from headwater.models import DocumentChange, Op
from tests.documents import write_pdf

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_each_bad_document_is_reported_and_isolated(harness, sample):
    harness.sync()
    indexed_before = harness.records()
    (sample / "broken.pdf").write_bytes(b"%PDF-1.4\n" + os.urandom(2048))
    (sample / "empty.md").write_bytes(b"")
    (sample / "binary.txt").write_bytes(bytes(range(256)) * 40)
    (sample / "latin1.md").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    with open(sample / "huge.txt", "wb") as handle:
        handle.truncate(50 * 1024 * 1024)
    # A document that was indexed, then overwritten with garbage: its old chunks must survive.
    (sample / "faq.html").write_bytes(b"<html>\x00\x01\x02 not text</html>")
    (sample / "fresh.md").write_text("# Fresh\n\nA good document added in the same pass.\n")

    report = harness.sync()

    assert "PDF" in report.failed["broken.pdf"]
    assert "binary content" in report.failed["binary.txt"]
    assert "not valid UTF-8 (byte 0xe9 at offset 3)" in report.failed["latin1.md"]
    assert "50.0 MB is above the 25 MB limit" in report.failed["huge.txt"]
    assert "binary content" in report.failed["faq.html"]
    assert "empty file" in report.skipped["empty.md"]
    assert report.exit_code == 2
    records = harness.records()
    assert "fresh.md" in records  # the good document went in
    assert records["faq.html"] == indexed_before["faq.html"]  # the broken update lost nothing
    for uri in set(indexed_before) - {"faq.html"}:
        assert records[uri].keys() == indexed_before[uri].keys()
    assert not {"broken.pdf", "binary.txt", "latin1.md", "huge.txt", "empty.md"} & set(records)


def test_a_pdf_without_a_text_layer_is_a_failure_not_an_empty_document(harness, sample):
    write_pdf(sample / "scanned.pdf", [[], []])
    report = harness.sync()
    assert "no text could be extracted" in report.failed["scanned.pdf"]
    assert "scanned.pdf" not in harness.records()


def test_a_file_deleted_between_scan_and_read(harness, sample):
    harness.sync()
    (sample / "faq.html").write_text("<h1>FAQ</h1><p>Edited, so the next pass must read it.</p>")
    listed = list(harness.connector.list_documents())
    (sample / "faq.html").unlink()
    (sample / "notes.md").write_text("# Notes\n\nWritten after the scan.\n")
    report = harness.engine.apply(harness.connector, listed + [
        DocumentChange("docs", "notes.md", Op.UPSERT, version="new")])
    assert "removed before it could be read" in report.skipped["faq.html"]
    records = harness.records()
    assert "faq.html" not in records and "notes.md" in records
    assert report.exit_code == 0


UNREADABLE_PROBE = """
import json, sys
from headwater.settings import Settings
from headwater.sync.embedded import open_engine
from connectors.folder import FolderConnector
with open_engine(Settings(chroma_path=sys.argv[2], collection="perm")) as engine:
    report = engine.sync(FolderConnector("perm", sys.argv[1]))
print(json.dumps({"failed": report.failed, "added": report.added}))
"""


def test_an_unreadable_file(tmp_path):
    root = tmp_path / "perm"
    root.mkdir()
    (root / "open.md").write_text("# Open\n\nEveryone may read this.\n")
    (root / "locked.md").write_text("# Locked\n\nNobody may read this.\n")
    (root / "locked.md").chmod(0)
    command = [sys.executable, "-c", UNREADABLE_PROBE, str(root), str(tmp_path / "chroma")]
    if os.geteuid() == 0:
        # Root reads any file; without the DAC capabilities it obeys permissions like a normal user.
        drop = "-dac_override,-dac_read_search"
        command = ["setpriv", f"--bounding-set={drop}", f"--inh-caps={drop}", "--", *command]
    result = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["added"] == 1
    assert "permission denied" in outcome["failed"]["locked.md"]

"""Watch mode follows create, modify, move and delete within seconds."""

from __future__ import annotations

import threading
import time

import pytest

from headwater.sync.watching import run_watch

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _eventually(check, seconds: float = 15.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError("the collection did not catch up within the deadline")


def test_watch_picks_up_create_modify_move_delete(make_harness, tmp_path):
    root = tmp_path / "watched"
    root.mkdir()
    (root / "existing.md").write_text("# Existing\n\nIndexed by the initial sync.\n")
    h = make_harness(root)
    h.sync()
    stop = threading.Event()
    reports = []
    watcher = threading.Thread(target=run_watch, args=(h.engine, h.connector, stop, reports.append), daemon=True)
    watcher.start()
    try:
        time.sleep(0.5)  # let the observer start
        # An editor-style save: several writes in a row become one change after the debounce.
        with open(root / "created.md", "w") as handle:
            handle.write("# Created\n\n")
            handle.flush()
            handle.write("Lanterns guide the night ferry across the harbour.\n")
        _eventually(lambda: "created.md" in h.records())

        (root / "created.md").write_text("# Created\n\nThe ferry now runs on electric motors.\n")
        def modified():
            texts = h.store.collection.get(where={"uri": "created.md"}, include=["documents"])["documents"]
            return any("electric motors" in t for t in texts)
        _eventually(modified)

        (root / "created.md").rename(root / "moved.md")
        _eventually(lambda: set(h.records()) == {"existing.md", "moved.md"})
        # Chunk texts start with their path, so the moved document's chunks name its new path.
        moved = h.store.collection.get(where={"uri": "moved.md"}, include=["documents"])["documents"]
        assert moved and all(t.startswith("moved.md") for t in moved)

        (root / "existing.md").unlink()
        _eventually(lambda: set(h.records()) == {"moved.md"})

        sub = root / "folder"
        sub.mkdir()
        (sub / "inner.md").write_text("# Inner\n\nA file inside a new directory.\n")
        _eventually(lambda: "folder/inner.md" in h.records())
        (root / "folder").rename(root / "renamed-folder")  # one directory event for all files below
        _eventually(lambda: set(h.records()) == {"moved.md", "renamed-folder/inner.md"})
    finally:
        stop.set()
        watcher.join(timeout=10)
    assert not watcher.is_alive()
    assert not any(r.failed for r in reports)


def test_a_file_written_between_the_first_pass_and_the_observer_is_not_missed(make_harness, tmp_path):
    """`headwater watch` syncs, prints "watching", then starts its observer: a file saved in between has no
    event. The watch begins with a catch-up pass, so it is indexed without any later change to announce it."""
    root = tmp_path / "watched"
    root.mkdir()
    (root / "existing.md").write_text("# Existing\n\nIndexed by the first pass.\n")
    h = make_harness(root)
    h.sync()
    (root / "between.md").write_text("# Between\n\nSaved after the first pass, before the observer ran.\n")
    stop = threading.Event()
    reports = []
    watcher = threading.Thread(target=run_watch, args=(h.engine, h.connector, stop, reports.append), daemon=True)
    watcher.start()
    try:
        _eventually(lambda: "between.md" in h.records())
        assert reports and reports[0].added == 1, reports
    finally:
        stop.set()
        watcher.join(timeout=10)

"""Embedded serve's run queue at the points between its state changes.

A run's record reads finished before its sync thread is done with it: consolidation follows on the
same thread. A user who sees the run finished and presses retry (or "Sync now") in that window must get
a queued run, as the fleet gives them, never "the source has an unfinished run" naming the finished one.
The same holds for a queued run that was cancelled before it started.
"""

from __future__ import annotations

import threading

import pytest

from headwater.sources.model import SourceConfig
from headwater.settings import Settings
from headwater.store.source_store import SourceStore
from tests.services import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def backend(tmp_path):
    from headwater.http.embedded_backend import EmbeddedBackend
    from headwater.http.sources import SourceCatalog

    folder = tmp_path / "handbook"
    folder.mkdir()
    (folder / "token.md").write_text("# Rotating the Chroma token\n\nRotate it every quarter.\n", encoding="utf-8")
    (folder / "latin1.md").write_bytes(b"caf\xe9 au lait, not UTF-8\n")
    settings = Settings(chroma_path=tmp_path / "chroma", config_file=tmp_path / "absent.toml",
                        database_url=f"sqlite:///{tmp_path / 'headwater.sqlite3'}")
    store = SourceStore.from_settings(settings)
    store.create_source(SourceConfig(id="handbook", kind="folder", options={"path": str(folder)}), {})
    running = EmbeddedBackend(settings, store, SourceCatalog(settings, store))
    running.folder = folder
    try:
        yield running
    finally:
        running.close()
        store.engine.dispose()


@pytest.mark.timeout(180)
def test_a_run_that_reads_finished_is_not_busy_while_it_consolidates(backend):
    consolidating, release = threading.Event(), threading.Event()
    consolidate = backend._consolidate

    def held_consolidation(engine, report):  # the window: the record is finished, the thread is not
        consolidating.set()
        release.wait(60)
        consolidate(engine, report)

    backend._consolidate = held_consolidation
    source = backend.catalog.get("handbook")
    first, busy = backend.trigger(source)
    assert first and busy is None
    assert backend.trigger(source) == (None, first)  # unfinished: refused, naming it
    wait_until(consolidating.is_set, 120, "the first run's consolidation")
    finished = backend.get_run(first)
    assert finished["finished"] and finished["status"] == "complete_with_errors", finished

    (backend.folder / "latin1.md").write_text("café au lait, now valid UTF-8\n", encoding="utf-8")
    retried, busy = backend.retry(first)
    assert retried and busy is None, busy
    assert backend.get_run(retried)["status"] == "pending"  # queued behind the consolidation, not run beside it
    assert backend.cancel(first) is False  # finished: nothing to cancel
    assert backend.cancel(retried) is True and backend.get_run(retried)["status"] == "cancelled"
    retried, busy = backend.retry(first)  # a cancelled run is finished too: queued again at once
    assert retried and busy is None, busy
    release.set()
    wait_until(lambda: backend.get_run(retried)["finished"], 120, "the retry run")
    again = backend.get_run(retried)
    assert again["status"] == "complete" and again["kind"] == "retry" and again["indexed"] == 1, again

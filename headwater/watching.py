"""Watch mode: a connector's debounced events drive incremental passes until told to stop."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from headwater.report import SyncReport
from headwater.sync_engine import SyncEngine


def run_watch(engine: SyncEngine, connector: Any, stop: threading.Event,
              on_report: Callable[[SyncReport], None] = lambda report: None) -> None:
    """Apply each settled batch of changes (or a full pass when the connector asks) until `stop` is set."""
    pending: queue.Queue = queue.Queue()
    watcher = threading.Thread(target=connector.watch, args=(pending.put, stop), name="headwater-watch", daemon=True)
    watcher.start()
    try:
        while not stop.is_set():
            try:
                changes = pending.get(timeout=0.2)
            except queue.Empty:
                if not watcher.is_alive() and not stop.is_set():
                    raise RuntimeError("the file system watcher stopped unexpectedly") from None
                continue
            on_report(engine.sync(connector) if changes is None else engine.apply(connector, changes))
    finally:
        stop.set()
        watcher.join(timeout=5)

"""Watch mode: a connector's debounced events drive incremental passes until told to stop."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from headwater.deletion_guard import MassDeleteRefused
from headwater.errors import ListingError
from headwater.report import SyncReport
from headwater.sync_engine import SyncEngine

log = logging.getLogger(__name__)


def run_watch(engine: SyncEngine, connector: Any, stop: threading.Event,
              on_report: Callable[[SyncReport], None] = lambda report: None,
              on_error: Callable[[Exception], None] = lambda exc: log.warning("%s", exc)) -> None:
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
            try:
                on_report(engine.sync(connector) if changes is None else engine.apply(connector, changes))
            except (ListingError, MassDeleteRefused) as exc:
                # A folder briefly unreadable or emptied (an unmount, a checkout in progress) is not a
                # reason to stop watching, nor to delete: say so and wait for the next change.
                on_error(exc)
    finally:
        stop.set()
        watcher.join(timeout=5)

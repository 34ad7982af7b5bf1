"""Watch mode: a connector's debounced events drive incremental passes until told to stop."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from headwater.pipeline.deletion_guard import MassDeleteRefused
from headwater.errors import ListingError
from headwater.pipeline.report import SyncReport
from headwater.sync.sync_engine import SyncEngine

log = logging.getLogger(__name__)
Consolidated = Callable[[Any], None]  # told of each consolidation pass that ran (a PassReport)


def _after_pass(engine: SyncEngine, report: SyncReport, on_report: Callable[[SyncReport], None],
                on_error: Callable[[Exception], None], on_consolidated: Consolidated) -> None:
    """Report a pass, then consolidate after it as every embedded writer does (a pass that wrote, when
    turned on); a consolidation that fails is reported and watching goes on: the writes stand."""
    from headwater.consolidation.stage import after_embedded_pass
    from headwater.errors import HeadwaterError

    on_report(report)
    try:
        done = after_embedded_pass(engine, report)
    except HeadwaterError as exc:
        on_error(exc)
        return
    if done is not None:
        on_consolidated(done)


def run_watch(engine: SyncEngine, connector: Any, stop: threading.Event,
              on_report: Callable[[SyncReport], None] = lambda report: None,
              on_error: Callable[[Exception], None] = lambda exc: log.warning("%s", exc),
              on_consolidated: Consolidated = lambda done: None) -> None:
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
                report = engine.sync(connector) if changes is None else engine.apply(connector, changes)
            except (ListingError, MassDeleteRefused) as exc:
                # A folder briefly unreadable or emptied (an unmount, a checkout in progress) is not a
                # reason to stop watching, nor to delete: say so and wait for the next change.
                on_error(exc)
                continue
            _after_pass(engine, report, on_report, on_error, on_consolidated)
    finally:
        stop.set()
        watcher.join(timeout=5)


def run_acknowledged_watch(engine: SyncEngine, connector: Any, stop: threading.Event,
                           on_report: Callable[[SyncReport], None] = lambda report: None,
                           on_error: Callable[[Exception], None] = lambda exc: log.warning("%s", exc),
                           on_dead_letter: Callable[[str, str, str], None] | None = None,
                           on_consolidated: Consolidated = lambda done: None) -> None:
    """Apply each batch of events in the connector's own thread, before the source forgets them.

    For sources whose events are acknowledged (an SQS message is deleted only once its changes are
    written): the changes are applied here, in-process, by the one engine that holds the embedded
    Chroma's lock; if applying raises, the connector keeps the events and they come again.
    """
    def apply(changes: list | None) -> None:
        if changes is None:
            try:
                report = engine.sync(connector)
            except (ListingError, MassDeleteRefused) as exc:
                on_error(exc)
                return
        else:
            report = engine.apply(connector, changes)
        _after_pass(engine, report, on_report, on_error, on_consolidated)

    connector.watch(apply, stop, on_dead_letter=on_dead_letter)

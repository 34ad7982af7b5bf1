"""Embedded serve: the one process of a small install. It holds the embedded Chroma's writer lock,
runs syncs one at a time on a background thread, runs per-source schedules in-process and answers
searches from the same collection.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from connectors.base import HasCursor
from headwater.errors import HeadwaterError
from headwater.http.runs_view import with_progress
from headwater.http.sources import SourceCatalog, build_source_connector
from headwater.models import DocumentChange, Op, Trigger
from headwater.settings import Settings
from headwater.store.source_store import RunRow, SourceStore

log = logging.getLogger("headwater.serve")


class RunCancelled(Exception):
    pass


@dataclass
class _Live:
    run_id: str
    source_id: str
    kind: str
    uris: list[str] | None = None
    allow_mass_delete: bool = False
    changes: list[DocumentChange] | None = None  # live changes (webhook events), applied as given
    job: Any = None  # a git push: job(engine) applies it and returns the report (None: nothing to do)
    config: Any = None  # the source's configuration when the run must outlive the source (a purge)
    done: int = 0
    total: int = 0
    cancel: threading.Event = field(default_factory=threading.Event)


class _Progress:
    """The engine's progress sink: forwards to the run in progress, and stops it when it is cancelled."""

    def __init__(self, backend: EmbeddedBackend) -> None:
        self.backend = backend

    def start(self, total_documents: int) -> None:
        live = self.backend.current
        if live is not None:
            live.total = total_documents

    def document_done(self, uri: str) -> None:
        live = self.backend.current
        if live is None:
            return
        live.done += 1
        self.backend.documents_done += 1
        if live.cancel.is_set():
            raise RunCancelled(live.run_id)

    def embedded(self, count: int) -> None: ...


class EmbeddedBackend:
    mode = "embedded"

    def __init__(self, settings: Settings, store: SourceStore, catalog: SourceCatalog) -> None:
        from headwater.sync.embedded import open_engine
        from headwater.retrieval.searcher import Searcher
        from headwater.pipeline.dense_source import dense_embedder
        from headwater.pipeline.embed_sparse import SpladeEncoder

        self.settings, self.store, self.catalog = settings, store, catalog
        self.current: _Live | None = None
        self.documents_done = 0
        self._lock = threading.Lock()
        self._pending: dict[str, _Live] = {}  # run id -> queued or running
        self._queue: queue.Queue[_Live | None] = queue.Queue()
        self._stack = contextlib.ExitStack()
        from headwater.store.source_cursors import CursorStore

        self.cursors = CursorStore(store)  # git sources' synced commits and the webhook deliveries taken
        # Raises ChromaPathBusy, naming the other writer, before anything else starts.
        from headwater.observability import metrics

        engine = self._stack.enter_context(open_engine(settings, _Progress(self), observers=[metrics.written]))
        # One engine per collection the sources write, all under this process's lock of the directory.
        self._engines = {settings.collection: engine}
        threads = settings.model_threads or 1
        # Queries get their own model instances: tokenizers are not safe to share with a running sync.
        self._query_models = (dense_embedder(settings, threads),
                              SpladeEncoder(settings.sparse_model_dir, threads, settings.onnx_cache_dir))
        self._searchers = {settings.collection: Searcher(engine.store, *self._query_models, engine.sparse_index, None)}
        self._stop = threading.Event()
        # Each schedule and when its period started, from the database: a restarted serve keeps them.
        self._periods: dict[str, tuple[str, float]] = store.schedule_marks()
        self._next_due: dict[str, float] = {}
        self._interrupted_runs()
        self._threads = [threading.Thread(target=self._work, name="headwater-serve-sync", daemon=True),
                         threading.Thread(target=self._schedule, name="headwater-serve-schedule", daemon=True)]
        for thread in self._threads:
            thread.start()

    def close(self) -> None:
        self._stop.set()
        if self.current is not None:
            self.current.cancel.set()
        self._queue.put(None)
        for thread in self._threads:
            thread.join(timeout=30)
        self._stack.close()

    def ready(self) -> tuple[bool, str]:
        alive = all(t.is_alive() for t in self._threads)
        return alive, "embedded engine open" if alive else "a background thread has stopped; see the log"

    def _interrupted_runs(self) -> None:
        """Runs left unfinished by a previous process (killed mid-sync) are marked failed, with why."""
        for row in self.store.list_runs(200):
            if row.status in ("pending", "running"):
                row.status, row.finished_at = "failed", time.time()
                row.errors = {**row.errors, "(source)": "the serve process stopped during this run; trigger it again"}
                self.store.save_run(row)

    # Runs ------------------------------------------------------------------------------------

    def trigger(self, source: Any, *, allow_mass_delete: bool = False, kind: str = "full",
                uris: list[str] | None = None, started_by: Trigger = Trigger.MANUAL) -> tuple[str | None, str | None]:
        """Queue a run of the source unless it has an unfinished one: (run id, None) or (None, busy run id)."""
        with self._lock:
            busy = next((r for r in self._pending.values() if r.source_id == source.id and r.kind != "live"), None)
            if busy is not None:
                return None, busy.run_id
            live = _Live(uuid.uuid4().hex, source.id, kind, uris, allow_mass_delete)
            self.store.save_run(RunRow(id=live.run_id, source_id=source.id, kind=kind, status="pending",
                                       created_at=time.time(), counters={}, errors={}, trigger=Trigger(started_by).value))
            self._pending[live.run_id] = live
        self._queue.put(live)
        return live.run_id, None

    def live_changes(self, source: Any, changes: list[DocumentChange]) -> str:
        """Queue live changes (webhook events) behind whatever runs now; they are never refused as busy."""
        live = _Live(uuid.uuid4().hex, source.id, "live", changes=list(changes))
        with self._lock:
            self.store.save_run(RunRow(id=live.run_id, source_id=source.id, kind="live", status="pending",
                                       created_at=time.time(), counters={}, errors={}, trigger=Trigger.S3_EVENT.value))
            self._pending[live.run_id] = live
        self._queue.put(live)
        return live.run_id

    def purge(self, source: Any) -> str | None:
        """Queue the removal of every document the source has in its collection (the source itself is being
        deleted); None when it has none."""
        stored = self.store_for(source.config.collection).documents(source.id)
        if not stored:
            return None
        live = _Live(uuid.uuid4().hex, source.id, "live", config=source.config,
                     changes=[DocumentChange(source.id, uri, Op.DELETE) for uri in sorted(stored)])
        with self._lock:
            self.store.save_run(RunRow(id=live.run_id, source_id=source.id, kind="live", status="pending",
                                       created_at=time.time(), counters={}, errors={}, trigger=Trigger.MANUAL.value))
            self._pending[live.run_id] = live
        self._queue.put(live)
        return live.run_id

    def submit_push(self, source: Any, push: Any) -> str:
        """Queue a git push as a run of its own: pushes of a source are applied one after another, in order."""
        from headwater.sync.git_pushes import sync_push_embedded

        def job(engine: Any, connector: Any) -> Any:
            try:
                return sync_push_embedded(engine, connector, self.cursors, push)
            except Exception:
                # Not applied (the fetch failed, say): a redelivery of this push must be taken, not a duplicate.
                if push.delivery:
                    self.cursors.release_delivery(push.delivery)
                raise

        live = _Live(uuid.uuid4().hex, source.id, "push", job=job)
        with self._lock:
            self.store.save_run(RunRow(id=live.run_id, source_id=source.id, kind="push", status="pending",
                                       created_at=time.time(), counters={}, errors={}, trigger=Trigger.WEBHOOK.value))
            self._pending[live.run_id] = live
        self._queue.put(live)
        return live.run_id

    def cancel(self, run_id: str) -> bool | None:
        """True: cancelled; False: already finished; None: no such run."""
        with self._lock:
            live = self._pending.get(run_id)
            if live is not None:
                live.cancel.set()
                row = self.store.get_run(run_id)
                if row is not None and row.status == "pending":
                    row.status, row.finished_at = "cancelled", time.time()
                    self.store.save_run(row)
                    # Finished: the source may be triggered again at once (the sync thread skips it when it
                    # comes off the queue).
                    self._pending.pop(run_id, None)
                return True
        return False if self.store.get_run(run_id) is not None else None

    def retry(self, run_id: str) -> tuple[str | None, str | None]:
        row = self.store.get_run(run_id)
        if row is None:
            raise LookupError(f"run {run_id} does not exist")
        if row.status in ("pending", "running"):
            raise ValueError(f"run {run_id} is still {row.status}; retry it once it has finished")
        source = self.catalog.get(row.source_id)
        if source is None:
            raise LookupError(f"source {row.source_id} no longer exists")
        if "(source)" in row.errors or row.status == "failed":
            return self.trigger(source, started_by=Trigger.RETRY)
        failed = sorted(row.errors)
        if not failed:
            raise ValueError(f"run {run_id} has no failed documents to retry")
        return self.trigger(source, kind="retry", uris=failed, started_by=Trigger.RETRY)

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        row = self.store.get_run(run_id)
        return None if row is None else self._view(row)

    def list_runs(self, limit: int = 50, source_id: str | None = None) -> list[dict[str, Any]]:
        return [self._view(row) for row in self.store.list_runs(limit, source_id)]

    def _view(self, row: RunRow) -> dict[str, Any]:
        run = {"id": row.id, "source_id": row.source_id, "kind": row.kind, "trigger": row.trigger or "manual",
               "status": row.status,
               "created_at": row.created_at, "started_at": row.started_at, "finished_at": row.finished_at,
               "collection": self.settings.collection,
               **{c: int(row.counters.get(c, 0)) for c in ("scanned", "unchanged", "queued", "indexed", "skipped",
                                                              "deleted", "failed")},
               "errors": dict(row.errors), "warnings": dict(row.warnings or {}), "skip_reasons": dict(row.skipped or {})}
        live = self._pending.get(row.id)
        if live is not None and row.status == "running":
            run["queued"] = live.total
            return with_progress(run, live.done, live.total)
        return with_progress(run)

    def _work(self) -> None:
        while not self._stop.is_set():
            live = self._queue.get()
            if live is None:
                return
            try:
                if not live.cancel.is_set():
                    self._run(live)
            except Exception:  # noqa: BLE001  (one bad run must not stop the loop)
                log.exception("run %s failed unexpectedly", live.run_id)
            finally:
                with self._lock:
                    self._pending.pop(live.run_id, None)
                self.current = None

    def _run(self, live: _Live) -> None:
        from headwater.observability import context, metrics

        bound = context.bind(run_id=live.run_id, source_id=live.source_id)  # in its logs and error reports
        try:
            self._run_bound(live, metrics)
        finally:
            context.reset(bound)

    def _run_bound(self, live: _Live, metrics: Any) -> None:
        row = self.store.get_run(live.run_id)
        row.status, row.started_at = "running", time.time()
        self.store.save_run(row)
        self.current = live
        try:
            config = live.config
            if config is None:
                source = self.catalog.get(live.source_id)
                if source is None:
                    raise HeadwaterError(f"source {live.source_id} was deleted before its run started")
                config = source.config
            connector = build_source_connector(self.settings, config)
            engine = self.engine_for(config.collection)
            if live.changes is not None:
                report = engine.apply(connector, live.changes)
            elif live.job is not None:
                report = live.job(engine, connector)
                if report is None:  # nothing to do (already synced, or the branch was deleted)
                    from headwater.pipeline.report import SyncReport

                    report = SyncReport(source_id=live.source_id).finish()
            elif live.uris is None:
                report = engine.sync(connector, allow_mass_delete=live.allow_mass_delete)
                if isinstance(connector, HasCursor) and connector.cursor:  # a git source: the commit this pass synced
                    self.cursors.set(live.source_id, connector.cursor)
            else:
                report = engine.apply(connector, [DocumentChange(live.source_id, u, Op.UPSERT) for u in live.uris])
        except RunCancelled:
            row.status = "cancelled"
        except (HeadwaterError, ValueError, OSError) as exc:
            row.status, row.errors = "failed", {"(source)": str(exc)}
        else:
            metrics.sync_report(report)
            indexed = report.added + report.updated + report.moved
            row.counters = {"scanned": indexed + report.unchanged + len(report.skipped) + len(report.failed),
                            "unchanged": report.unchanged, "queued": live.total, "indexed": indexed,
                            "skipped": len(report.skipped), "deleted": report.deleted, "failed": len(report.failed)}
            row.errors = dict(report.failed)
            row.warnings, row.skipped = dict(report.warnings), dict(report.skipped)
            row.status = "complete_with_errors" if report.failed else "complete"
        if row.status == "cancelled":
            row.counters = {"queued": live.total, "indexed": live.done}
        row.finished_at = time.time()
        with self._lock:
            # Finished and no longer busy in one step, as the fleet decides busy by the run's record: a trigger
            # or retry made after it reads as finished is queued (behind the consolidation below), never refused
            # naming a finished run.
            self.store.save_run(row)
            self._pending.pop(live.run_id, None)
        self.store.trim_runs(live.source_id, self.settings.run_history)
        if row.status.startswith("complete"):
            self._consolidate(engine, report)

    def _consolidate(self, engine: Any, report: Any) -> None:
        """After a run that wrote, consolidation as every embedded writer does it, on this sync thread
        (the one writer of the directory). A pass that fails is logged: the run's writes stand, and the
        next run that writes tries again."""
        from headwater.consolidation.stage import after_embedded_pass

        try:
            after_embedded_pass(engine, report)  # it logs what it did
        except Exception:  # noqa: BLE001  (a consolidation fault must not stop the sync thread)
            log.exception("consolidation after run of %s failed; the run's writes stand", report.source_id)

    # Schedules -------------------------------------------------------------------------------

    def _schedule(self) -> None:
        """Fire each scheduled source when due; a due source that is still running is skipped, not queued."""
        from schedules.source_schedules import schedule_spec, source_schedule

        while not self._stop.wait(0.5):
            try:
                sources = self.catalog.all()
            except Exception:  # noqa: BLE001  (the database blinked; try on the next tick)
                log.exception("could not read sources for the schedule")
                continue
            now = time.time()
            known = set()
            try:
                paused = self.store.paused_schedules()
            except Exception:  # noqa: BLE001  (the database blinked; try on the next tick)
                log.exception("could not read paused schedules")
                continue
            for source in sources:
                try:
                    every = source_schedule(source.config)
                except ValueError:
                    every = None
                if every is None or source.id in paused:
                    continue
                known.add(source.id)
                spec = schedule_spec(source.config)
                if self._periods.get(source.id, ("",))[0] != spec:  # new, or changed: its period starts now
                    self._mark(source.id, spec, now)
                last = self._periods[source.id][1]
                # Celery's estimate is the time left as of now, so the due time is now plus it.
                remaining = every.remaining_estimate(datetime.fromtimestamp(last, timezone.utc)).total_seconds()
                self._next_due[source.id] = now + max(0.0, remaining)
                if remaining > 0:
                    continue
                self._mark(source.id, spec, now)  # a missed period is dropped, never stacked
                try:
                    run_id, busy = self.trigger(source, started_by=Trigger.SCHEDULE)
                except ValueError as exc:
                    log.warning("scheduled run of %s not started: %s", source.id, exc)
                    continue
                if run_id is None:
                    log.info("scheduled run of %s skipped: run %s has not finished", source.id, busy)
            for gone in set(self._periods) - known:
                self._mark(gone, None)
                self._next_due.pop(gone, None)

    def _mark(self, source_id: str, spec: str | None, at: float = 0.0) -> None:
        if spec is None:
            self._periods.pop(source_id, None)
        else:
            self._periods[source_id] = (spec, at)
        try:
            self.store.mark_schedule(source_id, spec, at)
        except Exception:  # noqa: BLE001  (the database blinked: this process still keeps the time)
            log.exception("could not record the schedule of %s; a restart would start its period again", source_id)

    def next_run_at(self, source_id: str) -> float | None:
        return self._next_due.get(source_id)

    def schedule_changed(self, source: Any) -> None:
        """A source was saved, paused or resumed. Saved: the scheduler compares its schedule with the period it
        keeps (unchanged: kept). Paused: its period is dropped here and now, not at the scheduler's next tick,
        so a resume that follows within a tick still starts a new period, as a resume must."""
        if source.id in self.store.paused_schedules():
            self.schedule_removed(source.id)

    def schedule_removed(self, source_id: str) -> None:
        self._mark(source_id, None)
        self._next_due.pop(source_id, None)

    # Reads -----------------------------------------------------------------------------------

    def engine_for(self, collection: str | None) -> Any:
        """The engine writing `collection` (None: the default), opened on first use."""
        from headwater.observability import metrics
        from headwater.retrieval.searcher import Searcher
        from headwater.sync.embedded import engine_for

        name = collection or self.settings.collection
        with self._lock:
            if name not in self._engines:
                default = self._engines[self.settings.collection]
                engine = engine_for(self.settings.model_copy(update={"collection": name}), default.dense,
                                    default.sparse, _Progress(self), observers=[metrics.written])
                self._engines[name] = engine
                self._searchers[name] = Searcher(engine.store, *self._query_models, engine.sparse_index, None)
            return self._engines[name]

    def store_for(self, collection: str | None) -> Any:
        return self.engine_for(collection).store

    def search(self, text: str, k: int, mode: str, filters: Any, group_by: str = "document") -> list[Any]:
        """Search the collection that the filtered source writes (the default one without a source filter)."""
        collection = self.catalog.collection_of(filters.source_id)
        self.engine_for(collection)
        return self._searchers[collection].search(text, k=k, mode=mode, filters=filters, group_by=group_by)

    def queues(self) -> dict[str, Any]:
        """In-process: one queue, one worker (the sync thread)."""
        with self._lock:
            waiting = sum(1 for r in self._pending.values() if r is not self.current)
        return {"in-process": {"depth": waiting, "workers": ["serve (this process)"]}}

    def workers(self) -> list[dict[str, Any]]:
        """In-process: this serve's one sync thread."""
        with self._lock:
            current = self.current
        steps = [{"task": "sync", "run_id": current.run_id, "since": None}] if current is not None else []
        return [{"name": "serve (this process)", "state": "online", "queues": ["in-process"], "concurrency": 1,
                 "started_at": None, "last_seen": time.time(), "current_steps": steps}]

    def documents_processed(self) -> int:
        return self.documents_done

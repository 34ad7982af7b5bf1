"""Fleet serve: runs are queued for the workers through Redis, schedules live in Redis (celery-redbeat)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from headwater.http.runs_view import with_progress
from headwater.http.sources import SourceCatalog, build_source_connector
from headwater.settings import Settings
from headwater.store.source_store import SourceStore

log = logging.getLogger("headwater.serve")


class FleetBackend:
    mode = "fleet"

    def __init__(self, settings: Settings, store: SourceStore, catalog: SourceCatalog) -> None:
        from workers.sending import fleet_client
        from workers.celery_app import create_app

        self.settings, self.store, self.catalog = settings, store, catalog
        self.fleet = fleet_client(settings)
        self.celery = create_app(settings)
        self._searchers: dict[str, tuple[Any, int]] = {}
        self._search_lock = threading.Lock()
        self._workers: dict[str, list[str]] = {}
        self._workers_at = 0.0
        from concurrent.futures import ThreadPoolExecutor

        from headwater.store.source_cursors import CursorStore

        self.cursors = CursorStore(store)  # git sources' queued commits and the webhook deliveries taken
        # Git pushes are fetched, diffed and queued one at a time, in the order they arrived.
        self._pushes = ThreadPoolExecutor(1, thread_name_prefix="headwater-push")
        # Declared sources get their schedule entries when serve starts (API sources when saved).
        for source in catalog.all():
            self.schedule_changed(source)

    def close(self) -> None:
        self._pushes.shutdown(wait=True, cancel_futures=False)
        self.fleet.redis.close()

    def ready(self) -> tuple[bool, str]:
        import urllib.request

        try:
            self.fleet.redis.ping()
        except Exception as exc:  # noqa: BLE001
            return False, f"Redis is not reachable ({type(exc).__name__})"
        if self.settings.chroma_host:
            url = f"http://{self.settings.chroma_host}:{self.settings.chroma_port}/api/v2/heartbeat"
            try:
                urllib.request.urlopen(url, timeout=3)
            except Exception as exc:  # noqa: BLE001
                return False, f"the Chroma server is not reachable ({type(exc).__name__})"
        return True, "Redis and Chroma reachable"

    def _target(self, source: Any) -> Any:
        from headwater.fleet.context import local_target

        settings = self.settings
        if source.config.collection:
            settings = settings.model_copy(update={"collection": source.config.collection})
        return local_target(settings)

    def _spec(self, source: Any) -> dict[str, Any]:
        return build_source_connector(self.settings, source.config).spec()

    # Runs ------------------------------------------------------------------------------------

    def trigger(self, source: Any, *, allow_mass_delete: bool = False) -> tuple[str | None, str | None]:
        from schedules.source_schedules import start_unless_busy

        return start_unless_busy(self.fleet, self._spec(source), self._target(source), allow_mass_delete=allow_mass_delete)

    def live_changes(self, source: Any, changes: list[Any]) -> str | None:
        """Queue live changes (S3 events) for the workers; None when all were duplicates or stale."""
        from headwater.fleet.enqueue import enqueue_changes
        from headwater.models import Trigger

        return enqueue_changes(self.fleet, self._spec(source), self._target(source), changes, Trigger.S3_EVENT)
    def purge(self, source: Any) -> str | None:
        """Queue the removal of every document the source has in its collection (the source itself is being
        deleted); None when it has none. The run carries the source's spec, so it needs no catalog."""
        from headwater.fleet.enqueue import enqueue_changes
        from headwater.models import DocumentChange, Op, Trigger

        stored = self.store_for(source.config.collection).documents(source.id)
        if not stored:
            return None
        return enqueue_changes(self.fleet, self._spec(source), self._target(source),
                               [DocumentChange(source.id, uri, Op.DELETE) for uri in sorted(stored)], Trigger.MANUAL)

    def submit_push(self, source: Any, push: Any) -> None:
        """Fetch, diff and queue a git push in the background (the webhook has already been answered)."""
        self._pushes.submit(self._queue_push, source, push)

    def _queue_push(self, source: Any, push: Any) -> None:
        from headwater.sync.git_pushes import sync_push_fleet

        try:
            sync_push_fleet(self.fleet, self._target(source), build_source_connector(self.settings, source.config),
                            self.cursors, push)
        except Exception:  # noqa: BLE001  (the next push, or a full run, catches up)
            log.exception("push %s to %s was not queued", push.delivery, source.id)
            if push.delivery:  # so that GitHub's redelivery of it is taken, not answered as a duplicate
                self.cursors.release_delivery(push.delivery)

    def cancel(self, run_id: str) -> bool | None:
        if self.fleet.runs.get(run_id) is None:
            return None
        return self.fleet.runs.cancel(run_id)

    def retry(self, run_id: str) -> tuple[str | None, str | None]:
        from headwater.fleet.enqueue import retry_run
        from schedules.source_schedules import busy_run

        run = self.fleet.runs.get(run_id)
        if run is None:
            raise LookupError(f"run {run_id} does not exist (or its history was trimmed)")
        busy = busy_run(self.fleet.runs.list(200, run.source_id)) if run.status.finished else None
        if busy is not None:
            return None, busy.id
        return retry_run(self.fleet, run_id), None

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        run = self.fleet.runs.get(run_id)
        if run is None:
            return None
        view = with_progress(run.to_json())
        if not view["finished"]:
            # Steps whose worker stopped renewing their lease (it died): the sweeper runs them again.
            every = self.settings.sweep_interval_seconds
            view["stalled"] = [{"step": step, "uri": uri, "lease_expired_at": at, "redrive_by": at + every}
                               for step, uri, at in self.fleet.state.stalled(run_id)]
            # Steps queued but never taken in time: no worker held them, so no lost worker is to blame.
            view["unsent"] = [{"step": step, "uri": uri, "due_at": at, "redrive_by": at + every}
                              for step, uri, at in self.fleet.state.unsent(run_id)]
        return view

    def list_runs(self, limit: int = 50, source_id: str | None = None) -> list[dict[str, Any]]:
        return [with_progress(r.to_json()) for r in self.fleet.runs.list(limit, source_id)]

    # Schedules -------------------------------------------------------------------------------

    def schedule_changed(self, source: Any) -> None:
        from schedules.source_schedules import delete_entry, save_entry

        if source.id in self.store.paused_schedules():
            delete_entry(self.celery, source.id)
            return
        target = self._target(source)
        save_entry(self.celery, source.config, self._spec(source),
                   {"collection": target.collection, "dense_model": target.dense_model,
                    "sparse_model": target.sparse_model})

    def schedule_removed(self, source_id: str) -> None:
        from schedules.source_schedules import delete_entry

        delete_entry(self.celery, source_id)

    def periodic(self) -> None:
        """Put back schedule entries Redis lost (it may restart empty): the durable store is their source."""
        from schedules.source_schedules import next_run_at, source_schedule

        for source in self.catalog.all():
            if source_schedule(source.config) is not None and next_run_at(self.celery, source.id) is None:
                self.schedule_changed(source)

    def next_run_at(self, source_id: str) -> float | None:
        from schedules.source_schedules import next_run_at

        return next_run_at(self.celery, source_id)

    # Reads -----------------------------------------------------------------------------------

    def store_for(self, collection: str | None) -> Any:
        from headwater.pipeline.stores import open_store

        settings = self.settings.model_copy(update={"collection": collection or self.settings.collection})
        return open_store(settings, fleet=True, create=False)

    def search(self, text: str, k: int, mode: str, filters: Any, group_by: str = "document") -> list[Any]:
        """Hybrid search like `headwater query`.

        The searcher's sparse index follows the server's write log (headwater.retrieval.write_log); only
        without Redis for that is the in-memory index rebuilt when the collection changed.
        """
        from headwater.retrieval.searcher import open_searcher
        from headwater.retrieval.sparse_index import SparseIndex

        with self._search_lock:
            # The collection that the filtered source writes (the default one without a source filter).
            key = self.catalog.collection_of(filters.source_id)
            searcher, stamp = self._searchers.get(key, (None, -1))
            fresh = self._freshness()
            if searcher is None:
                searcher = open_searcher(self.settings.model_copy(update={"collection": key}))
            elif searcher.follower is None and (stamp != fresh or searcher.store.count() != len(searcher.index)):
                searcher.index = SparseIndex.rebuild(searcher.store.collection, None)
            self._searchers[key] = (searcher, fresh)
        return searcher.search(text, k=k, mode=mode, filters=filters, group_by=group_by)

    def _freshness(self) -> int:
        """Changes whenever a run finishes (a rewritten chunk keeps the count but changes the index)."""
        return hash(tuple((r.id, r.status.value) for r in self.fleet.runs.list(20)))

    def queues(self) -> dict[str, Any]:
        """Depth of every stage's queue (LLEN in the broker) and the workers consuming it."""
        from headwater import queues as names

        pipe = self.fleet.redis.pipeline()
        for queue in names.ALL_QUEUES:
            pipe.llen(queue)
        depths = pipe.execute()
        workers = self._queue_workers()
        return {queue: {"depth": int(depth), "workers": workers.get(queue, [])}
                for queue, depth in zip(names.ALL_QUEUES, depths)}

    def _queue_workers(self) -> dict[str, list[str]]:
        """queue -> worker hostnames, from Celery's remote control (cached: each ask waits up to a second)."""
        if time.monotonic() - self._workers_at < 10:
            return self._workers
        by_queue: dict[str, list[str]] = {}
        try:
            replies = self.celery.control.inspect(timeout=1.0).active_queues() or {}
        except Exception:  # noqa: BLE001  (broker blinked: show no workers rather than fail the page)
            replies = {}
        for worker, queues in replies.items():
            for queue in queues:
                by_queue.setdefault(queue["name"], []).append(worker)
        self._workers, self._workers_at = {q: sorted(w) for q, w in by_queue.items()}, time.monotonic()
        return self._workers

    def workers(self) -> list[dict[str, Any]]:
        from headwater.fleet.worker_registry import WorkerRegistry

        return WorkerRegistry(self.fleet.redis).workers()

    def documents_processed(self) -> int:
        return sum(r.counters.get(c, 0) for r in self.fleet.runs.list(500) for c in ("indexed", "skipped", "failed"))

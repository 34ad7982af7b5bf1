"""The per-process resources a fleet step needs: Redis, the state machine, stores, models, connectors."""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from headwater.store.chroma_store import ChromaStore
from headwater.pipeline.stores import open_store
from headwater.backoff import backoff_delay
from headwater.errors import ConfigurationError, RunDataMissing
from headwater.fleet.crash import CrashPoints
from headwater.fleet.payloads import PayloadStore
from headwater.fleet.runs import Run, RunStore, Target
from headwater.fleet.stage_costs import StageCosts
from headwater.fleet.state import StateMachine
from headwater.redis_connection import redis_client
from headwater.settings import Settings
from headwater.retrieval.write_log import WriteLog

log = logging.getLogger(__name__)

# send(step, args, countdown=None): enqueue a step's task (workers/tasks.py routes it to its queue).
Send = Callable[..., None]


def local_target(settings: Settings) -> Target:
    """The collection and model identities this process's settings name."""
    from headwater.pipeline.model_identity import sparse_identity
    from headwater.pipeline.dense_source import dense_model_identity

    return Target(settings.collection, dense_model_identity(settings), sparse_identity(settings.sparse_model_dir))


_RUNS_CACHED = 256  # run records a process keeps (a run's target, source and numbering never change)


class Fleet:
    def __init__(self, settings: Settings, send: Send, pool_processes: int = 1) -> None:
        self.settings = settings
        self.send = send
        # One model thread per core of this worker's share: pool processes each run one task at a
        # time, so more threads than that only make the processes fight over the same cores.
        self.model_threads = settings.model_threads or max(1, (os.cpu_count() or 1) // max(1, pool_processes))
        self.redis = redis_client(settings)
        self.runs = RunStore(self.redis, settings.run_history)
        self.state = StateMachine(self.redis, lease_seconds=settings.lease_seconds,
                                  redrive_after_seconds=settings.redrive_after_seconds,
                                  max_deliveries=settings.max_deliveries, max_retries=settings.task_max_retries)
        self.payloads = PayloadStore(self.redis, settings.payload_ttl_seconds)
        self.crash = CrashPoints(self.redis, settings.test_crash_points)
        self.costs = StageCosts(self.redis)
        self._runs: dict[str, Run] = {}
        self._stores: dict[str, ChromaStore] = {}
        self._stores_lock = threading.Lock()

    # Runs and targets ------------------------------------------------------------------------

    def run(self, run_id: str) -> Run:
        """A run's record as first read by this process: its target, source, kind and seq never change.

        Its status and counters do; steps never decide from them (the transitions read the live state).
        """
        run = self._runs.get(run_id)
        if run is None:
            run = self.runs.get(run_id)
            if run is None:
                raise RunDataMissing(f"run {run_id} no longer exists (its history was trimmed or Redis was emptied)")
            if len(self._runs) >= _RUNS_CACHED:
                self._runs.pop(next(iter(self._runs)))
            self._runs[run_id] = run
        return run

    def store(self, target: Target) -> ChromaStore:
        """The run's collection, opened once per process; refused if it holds another model's vectors."""
        with self._stores_lock:
            if target.collection not in self._stores:
                settings = self.settings.model_copy(update={"collection": target.collection})
                store = open_store(
                    settings, fleet=True, dense_model=target.dense_model, sparse_model=target.sparse_model)
                if not store.cloud:  # searchers follow the log to keep their sparse index current
                    store.observers.append(WriteLog(self.redis, target.collection))
                from headwater.consolidation.stage import consolidation_trigger  # writes schedule consolidation passes

                store.observers.append(consolidation_trigger(self.redis, self.send, target.collection))
                from headwater.observability import metrics

                store.observers.append(metrics.written)  # chunks written and upsert batch sizes
                self._stores[target.collection] = store
            return self._stores[target.collection]

    @functools.cached_property
    def dense_model(self) -> str:
        """This worker's dense identity: an endpoint's is probed only by a worker that embeds dense."""
        from headwater.pipeline.dense_source import dense_model_identity

        return dense_model_identity(self.settings)

    @functools.cached_property
    def sparse_model(self) -> str:
        from headwater.pipeline.model_identity import sparse_identity

        return sparse_identity(self.settings.sparse_model_dir)

    def check_models(self, run: Run, side: str) -> None:
        """A worker embeds for a run only with the model the run was queued with."""
        from headwater.store.model_match import same_model

        mine = self.dense_model if side == "dense" else self.sparse_model
        wanted = run.target.dense_model if side == "dense" else run.target.sparse_model
        if not same_model(wanted, mine):
            raise ConfigurationError(
                f"this worker's {side} model is {mine} but run {run.id} needs {wanted}; give the "
                f"{side} pool the same model files (HEADWATER_{side.upper()}_MODEL_DIR"
                + (", or HEADWATER_DENSE_ENDPOINT_* for an embedding service" if side == "dense" else "")
                + ") as the process that queued it")

    @functools.cached_property
    def dense(self) -> Any:
        from headwater.pipeline.dense_source import dense_embedder

        return dense_embedder(self.settings, self.model_threads)  # an endpoint loads no model

    @functools.cached_property
    def sparse(self) -> Any:
        from headwater.pipeline.embed_sparse import SpladeEncoder

        s = self.settings
        return SpladeEncoder(s.sparse_model_dir, self.model_threads, s.onnx_cache_dir)

    def connector(self, run_id: str) -> Any:
        """The run's connector, built from its spec through the one registry (its options validated again)."""
        from connectors import build_connector
        from headwater.sources.build import runtime_options

        spec = self.runs.spec(run_id)
        shared: dict[str, Any] = runtime_options(self.settings, spec["kind"])
        if spec["kind"] == "web":  # a crawl's page records, robots.txt and host pacing live in Redis
            from headwater.fleet.crawl import crawl_services

            shared = crawl_services(self.redis, spec["id"])
        return build_connector(spec["kind"], spec["id"], spec["options"], **shared)

    # Leases ----------------------------------------------------------------------------------

    @contextmanager
    def renewing(self, members: list[str], token: str) -> Iterator[None]:
        """Keep these leases alive while the block runs (a thread renews them every lease/4).

        Renewal stops after visibility_timeout_seconds, the documented bound on one task: a step
        hung on a source that never answers then loses its lease and is run again (and, after
        max_deliveries, failed), instead of holding its run open forever.
        """
        stop = threading.Event()
        give_up_at = time.monotonic() + self.settings.visibility_timeout_seconds

        def renew() -> None:
            while not stop.wait(self.settings.lease_seconds / 4) and time.monotonic() < give_up_at:
                try:
                    self.state.renew(token, members)
                except Exception as exc:  # noqa: BLE001  (Redis blinked: the next renewal tries again)
                    # Said, because renewals that keep failing let the lease expire and the sweeper
                    # re-drive a step that is still running.
                    log.warning("could not renew the lease of %s (%s: %s); trying again", ", ".join(members),
                                type(exc).__name__, exc)

        thread = threading.Thread(target=renew, name="headwater-lease", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=5)

    def backoff(self, attempt: int) -> float:
        """Exponential backoff with equal jitter: half of each step is guaranteed, so retries span an outage."""
        return backoff_delay(attempt, 1.0, self.settings.retry_backoff_max_seconds)

    @staticmethod
    def new_token() -> str:
        return uuid.uuid4().hex

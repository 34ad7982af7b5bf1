"""The per-process resources a fleet step needs: Redis, the state machine, stores, models, connectors."""

from __future__ import annotations

import functools
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from headwater.chroma_store import ChromaStore
from headwater.errors import ConfigurationError, RunDataMissing
from headwater.fleet.crash import CrashPoints
from headwater.fleet.payloads import PayloadStore
from headwater.fleet.runs import Run, RunStore, Target
from headwater.fleet.stage_costs import StageCosts
from headwater.fleet.state import StateMachine
from headwater.settings import Settings
from headwater.write_log import WriteLog

# send(step, args, countdown=None): enqueue a step's task (workers/tasks.py routes it to its queue).
Send = Callable[..., None]


def redis_client(settings: Settings) -> Any:
    """A Redis client for the configured URL."""
    import redis

    return redis.Redis.from_url(settings.redis_url.get_secret_value(), health_check_interval=30)


def local_target(settings: Settings) -> Target:
    """The collection and model identities this process's settings name."""
    from headwater.model_identity import dense_identity, sparse_identity

    return Target(settings.collection, dense_identity(settings.dense_model_dir, settings.dense_int8), sparse_identity(settings.sparse_model_dir))


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
                store = ChromaStore.from_settings(
                    settings, fleet=True, dense_model=target.dense_model, sparse_model=target.sparse_model)
                if not store.cloud:  # searchers follow the log to keep their sparse index current
                    store.observers.append(WriteLog(self.redis, target.collection))
                from workers.consolidate import consolidation_trigger  # writes schedule consolidation passes

                store.observers.append(consolidation_trigger(self.redis, self.send, target.collection))
                from headwater.observability import metrics

                store.observers.append(metrics.written)  # chunks written and upsert batch sizes
                self._stores[target.collection] = store
            return self._stores[target.collection]

    @functools.cached_property
    def target(self) -> Target:
        return local_target(self.settings)

    def check_models(self, run: Run, side: str) -> None:
        """A worker embeds for a run only with the model the run was queued with."""
        mine = self.target.dense_model if side == "dense" else self.target.sparse_model
        wanted = run.target.dense_model if side == "dense" else run.target.sparse_model
        if mine != wanted:
            raise ConfigurationError(
                f"this worker's {side} model is {mine} but run {run.id} needs {wanted}; give the "
                f"{side} pool the same model files (HEADWATER_{side.upper()}_MODEL_DIR) as the process that queued it")

    @functools.cached_property
    def dense(self) -> Any:
        from workers.embed_dense import DenseEmbedder

        s = self.settings
        return DenseEmbedder(s.dense_model_dir, self.model_threads, int8=s.dense_int8, cache_dir=s.onnx_cache_dir)

    @functools.cached_property
    def sparse(self) -> Any:
        from workers.embed_sparse import SpladeEncoder

        s = self.settings
        return SpladeEncoder(s.sparse_model_dir, self.model_threads, s.onnx_cache_dir)

    def connector(self, run_id: str) -> Any:
        """The run's connector, built from its spec through the one registry (its options validated again)."""
        from connectors import build_connector
        from headwater.sources import runtime_options

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
                except Exception:  # noqa: BLE001  (Redis blinked: the next renewal tries again)
                    continue

        thread = threading.Thread(target=renew, name="headwater-lease", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=5)

    def backoff(self, attempt: int) -> float:
        """Exponential backoff with equal jitter: half of each step is guaranteed, so retries span an outage."""
        step = min(self.settings.retry_backoff_max_seconds, 2.0 ** attempt)
        return step / 2 + random.uniform(0, step / 2)

    @staticmethod
    def new_token() -> str:
        return uuid.uuid4().hex

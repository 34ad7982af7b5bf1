"""Celery signals that give every fleet task its context (run, source, document) and its stage metrics.

Connected in the worker's main process before the pool forks, so every pool process has them.
The handlers never raise: observability must not fail a task.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from headwater.observability import context
from headwater.settings import Settings

log = logging.getLogger(__name__)

_started: dict[str, tuple[float, Any]] = {}  # task id -> (start, context token)
_source_of_run: dict[str, str] = {}
_settings: dict[str, Settings] = {}


def connect(settings: Settings) -> None:
    """Connect the task signals (once per process)."""
    from celery import signals

    if _settings:
        return
    _settings["current"] = settings
    signals.task_prerun.connect(_prerun, weak=False)
    signals.task_postrun.connect(_postrun, weak=False)
    signals.task_failure.connect(_failure, weak=False)
    signals.task_retry.connect(_retry, weak=False)
    signals.worker_process_shutdown.connect(_process_shutdown, weak=False)


def task_ids(task_name: str, args: list[Any] | tuple[Any, ...]) -> dict[str, str | None]:
    """The ids a task is about, from its arguments: (run_id[, uri]) or (collection,) for batched stages."""
    from headwater import queues as names

    args = list(args or ())
    first = str(args[0]) if args else None
    if task_name in (names.EMBED_DENSE, names.EMBED_SPARSE, names.FLUSH):
        return {"collection": first}
    if task_name in (names.LIST_SOURCE, names.FETCH, names.PARSE, names.FINISH):
        return {"run_id": first, "document": str(args[1]) if len(args) > 1 else None}
    return {}


def _source_id(run_id: str | None) -> str | None:
    """The run's source, read once per run from its record in Redis."""
    if not run_id:
        return None
    if run_id not in _source_of_run:
        try:
            import redis

            from headwater.fleet import keys

            client = redis.Redis.from_url(_settings["current"].redis_url.get_secret_value(), socket_timeout=2)
            found = client.hget(keys.run(run_id), "source_id")
            if found is None:
                return None
            if len(_source_of_run) > 10_000:
                _source_of_run.clear()
            _source_of_run[run_id] = found.decode()
        except Exception:  # noqa: BLE001  (Redis blinked: the report goes without the source)
            return None
    return _source_of_run[run_id]


def _prerun(task_id: str = "", task: Any = None, args: Any = None, **_: Any) -> None:
    try:
        name = getattr(task, "name", "") or ""
        ids = task_ids(name, args or ())
        token = context.bind(task=name, source_id=_source_id(ids.get("run_id")), **ids)
        _started[task_id] = (time.perf_counter(), token)
    except Exception as exc:  # noqa: BLE001
        log.debug("no task context: %s", exc)


def _postrun(task_id: str = "", task: Any = None, **_: Any) -> None:
    started = _started.pop(task_id, None)
    if started is None:
        return
    try:
        from headwater.observability import metrics

        metrics.STAGE_SECONDS.labels(metrics.stage_of_task(getattr(task, "name", ""))).observe(
            time.perf_counter() - started[0])
        context.reset(started[1])
    except Exception as exc:  # noqa: BLE001
        log.debug("no stage metric: %s", exc)
        context.clear()


def _failure(sender: Any = None, exception: BaseException | None = None, **_: Any) -> None:
    from headwater.observability import metrics

    metrics.FAILURES.labels(metrics.stage_of_task(getattr(sender, "name", "")), type(exception).__name__).inc()


def _retry(sender: Any = None, reason: Any = None, **_: Any) -> None:
    from headwater.observability import metrics

    metrics.RETRIES.labels(metrics.stage_of_task(getattr(sender, "name", "")), type(reason).__name__).inc()


def _process_shutdown(pid: int | None = None, **_: Any) -> None:
    from headwater.observability import metrics

    if pid:
        metrics.process_exited(pid)


def start_worker_metrics(settings: Settings, queues: str | None) -> None:
    """With HEADWATER_METRICS_PORT: the pool's shared samples directory now, and /metrics once Celery starts.

    Called before anything imports prometheus_client (the directory decides its storage).
    """
    if settings.metrics_port is None:
        return
    from headwater.observability.multiproc import prepare_multiprocess_dir

    prepare_multiprocess_dir(settings.metrics_dir)
    from celery import signals

    from headwater.observability import metrics
    from headwater import queues as names

    served = queues.split(",") if queues else list(names.ALL_QUEUES)

    def serve(**_: object) -> None:  # in the main process, once the worker is up
        metrics.serve_worker_metrics(settings.metrics_port, served, settings.redis_url.get_secret_value())

    signals.worker_init.connect(serve, weak=False)

"""A worker's heartbeat and its current steps, written to the fleet's worker registry (headwater.fleet.worker_registry)."""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from headwater.fleet.worker_registry import HEARTBEAT_SECONDS, WorkerRegistry
from headwater.settings import Settings

log = logging.getLogger(__name__)
_worker: dict[str, Any] = {}  # this worker's name and registry, set in the main process before the pool forks


def start(settings: Settings, name: str, queues: list[str], concurrency: int) -> None:
    """Beat every HEARTBEAT_SECONDS from the main process once it is ready; pool processes record the step they run."""
    from celery import signals

    from headwater.redis_connection import redis_client

    registry = WorkerRegistry(redis_client(settings))
    _worker.update(name=name, registry=registry)
    try:  # before the pool forks, so that no step of this worker is cleared with its predecessor's
        registry.started(name)
    except Exception as exc:  # noqa: BLE001  (Redis not reachable: a killed predecessor's steps stay listed)
        log.warning("could not clear the steps a previous worker named %s left (%s)", name, type(exc).__name__)
    started_at, stop = time.time(), threading.Event()
    beating: list[threading.Thread] = []

    def beat() -> None:
        while True:
            try:
                registry.heartbeat(name, queues, concurrency, started_at)
            except Exception as exc:  # noqa: BLE001  (Redis blinked: the next beat tries again)
                log.warning("heartbeat not written (%s); the dashboard may show this worker offline", type(exc).__name__)
            if stop.wait(HEARTBEAT_SECONDS):
                return

    def shutdown(**_: Any) -> None:
        stop.set()
        for thread in beating:  # a beat written after the stop would say it is still online
            thread.join(timeout=HEARTBEAT_SECONDS)
        try:
            registry.stopped(name)
        except Exception as exc:  # noqa: BLE001  (it will show as offline instead of stopped)
            log.warning("could not record this worker's stop (%s)", type(exc).__name__)

    def ready(**_: Any) -> None:  # online once it consumes: a worker still starting up is not one yet
        beating.append(threading.Thread(target=beat, name="headwater-heartbeat", daemon=True))
        beating[0].start()

    signals.worker_ready.connect(ready, weak=False)
    signals.worker_shutdown.connect(shutdown, weak=False)
    signals.task_prerun.connect(_step_started, weak=False)
    signals.task_postrun.connect(_step_ended, weak=False)


def _step_started(task: Any = None, args: Any = None, **_: Any) -> None:
    from workers.celery_hooks import task_ids

    try:
        name = getattr(task, "name", "") or ""
        _worker["registry"].step_started(_worker["name"], _process(), name, task_ids(name, args or ()))
    except Exception as exc:  # noqa: BLE001  (observability must not fail a task)
        log.debug("current step not recorded: %s", exc)


def _step_ended(**_: Any) -> None:
    try:
        _worker["registry"].step_ended(_worker["name"], _process())
    except Exception as exc:  # noqa: BLE001
        log.debug("current step not cleared: %s", exc)


def _process() -> str:
    """The pool slot running a step: a process of a prefork pool, a thread of a threads pool."""
    return f"{os.getpid()}:{threading.get_ident()}"

"""Celery tasks: thin wrappers that call the plain step functions in headwater.fleet.steps.

Everything that makes the fleet correct lives in the steps and the state machine: leases,
retries with backoff, poison pills, terminal states. A task only finds its process's Fleet and
calls its step; whatever it sends next goes through `send`, routed by headwater/queues.py.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from celery import shared_task, signals

from headwater.fleet import steps
from headwater.fleet.context import Fleet
from headwater.settings import load_settings
from headwater import queues as names
from workers.sending import sender


_pool = {"processes": 1}  # this worker's pool size, seen in its main process before the pool forks


_fleet_lock = threading.Lock()  # a threads pool's tasks may all ask for it at once


def _fleet() -> Fleet:
    with _fleet_lock:
        return _build_fleet()


@functools.cache
def _build_fleet() -> Fleet:
    # One per worker process: models and clients are loaded once and reused by every task.
    return Fleet(load_settings(), sender(), pool_processes=_pool["processes"])


@signals.worker_init.connect
def _preload(sender: Any = None, **_: Any) -> None:
    from workers.preload import heavy_imports

    _pool["processes"] = int(getattr(sender, "concurrency", None) or 1)
    pool = getattr(sender, "pool_cls", None)
    if "thread" in str(getattr(pool, "__module__", pool)):
        return  # a threads pool (the embed pool with an endpoint) forks nothing: import what its tasks need only
    heavy_imports()


@signals.worker_process_init.connect
def _quiet_http_logs(**_: Any) -> None:
    # One INFO line per Chroma request drowns the task log; failures still surface as errors.
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)


def _task(name: str, step):  # noqa: ANN001, ANN202
    @shared_task(name=name, acks_late=True, ignore_result=True)
    def task(*args: Any) -> None:
        step(_fleet(), *args)
    return task


list_source = _task(names.LIST_SOURCE, steps.list_source)
fetch = _task(names.FETCH, steps.fetch)
parse = _task(names.PARSE, steps.parse)
embed_sparse = _task(names.EMBED_SPARSE, steps.embed_sparse)
embed_dense = _task(names.EMBED_DENSE, steps.embed_dense)
flush = _task(names.FLUSH, steps.flush)
finish = _task(names.FINISH, steps.finish)
sweep = _task(names.SWEEP, steps.sweep)

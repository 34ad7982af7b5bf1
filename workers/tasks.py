"""Celery tasks: thin wrappers that call the plain step functions in headwater.fleet.

Retries: any failure inside a step other than a bad document (those are recorded, not raised)
is retried with exponential backoff and jitter: Chroma restarting, Redis failing over,
a source returning 5xx. After the last retry the document is recorded as failed in its run,
so a run always finishes.
"""

from __future__ import annotations

import functools
import logging
import random
from typing import Any

from celery import Task

from headwater import fleet as steps
from headwater.settings import load_settings
from workers import names
from workers.celery_app import app

log = logging.getLogger(__name__)


@functools.cache
def _fleet() -> steps.Fleet:
    # One per worker process: models and clients are loaded once and reused by every task.
    def send(task: str, args: list[Any], countdown: float | None = None) -> None:
        app.send_task(task, args=args, countdown=countdown, queue=names.ROUTES[task])

    return steps.Fleet(load_settings(), send)


class StepTask(Task):
    """Retries with backoff and jitter; a document whose retries ran out is failed in its run."""

    max_retries = load_settings().task_max_retries

    def retry_later(self, exc: Exception) -> None:
        # Exponential backoff with "equal jitter": half the step is guaranteed, so the retries
        # span a few minutes (a Chroma restart) rather than possibly all landing in one second.
        step = min(60.0, 2.0 ** self.request.retries)
        raise self.retry(exc=exc, countdown=step / 2 + random.uniform(0, step / 2))

    def on_failure(self, exc, task_id, args, kwargs, einfo) -> None:  # noqa: ANN001  (Celery's signature)
        if self.name in (names.SYNC_SOURCE, names.FEED) and args:
            # The run itself cannot go on (its source cannot be listed): close it as failed.
            _fleet().runs.record_error(args[0], "(source)", f"{type(exc).__name__}: {exc}"[:300])
            _fleet().runs.finish(args[0], failed=True)
        elif self.name in (names.FETCH, names.PARSE) and args:
            uri = args[1]["uri"] if self.name == names.FETCH else args[2]["uri"]
            _fleet().runs.record_error(args[0], uri, f"gave up after {self.max_retries} retries: "
                                                     f"{type(exc).__name__}")
            _fleet()._done(args[0], uri)


def _step(name: str):
    def register(function):
        @app.task(name=name, base=StepTask, bind=True, acks_late=True)
        def task(self: StepTask, *args: Any) -> None:
            try:
                function(_fleet(), *args)
            except Exception as exc:  # noqa: BLE001  (bad documents never get here; the rest is worth a retry)
                log.warning("%s failed (%s: %s); retrying", name, type(exc).__name__, exc)
                self.retry_later(exc)
        return task
    return register


sync_source = _step(names.SYNC_SOURCE)(steps.sync_source)
feed = _step(names.FEED)(steps.feed)
fetch = _step(names.FETCH)(steps.fetch)
parse = _step(names.PARSE)(steps.parse)
embed_sparse = _step(names.EMBED_SPARSE)(steps.embed_sparse)
embed_dense = _step(names.EMBED_DENSE)(steps.embed_dense)
flush = _step(names.FLUSH)(steps.flush)

"""Sending a fleet step's task: the one place a task name becomes a Celery message on its queue."""

from __future__ import annotations

from typing import Any

from celery import Celery, current_app

from headwater import queues as names
from headwater.fleet.context import Fleet, Send
from headwater.settings import Settings


def sender(app: Celery | None = None) -> Send:
    """send(task, args, countdown=None) through `app` (in a worker: the app it runs), routed by headwater.queues."""
    def send(task: str, args: list[Any], countdown: float | None = None) -> None:
        (app or current_app).send_task(task, args=args, countdown=countdown, queue=names.ROUTES[task])

    return send


def fleet_client(settings: Settings) -> Fleet:
    """A Fleet that sends tasks through Celery (for processes that enqueue: the CLI, the HTTP app)."""
    from workers.celery_app import create_app

    if not settings.is_remote:
        raise ValueError("fleet mode needs a Chroma server: set HEADWATER_CHROMA_HOST (several workers "
                         "writing one embedded Chroma directory corrupt its index)")
    return Fleet(settings, sender(create_app(settings)))

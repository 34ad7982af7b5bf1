"""Celery tasks of the consolidation queue: thin wrappers over workers.consolidate."""

from __future__ import annotations

import functools
from typing import Any

from headwater.settings import Settings, load_settings
from workers import names
from workers.celery_app import app
from workers.consolidate import data_collections, fleet_consolidate


@functools.cache
def _settings() -> Settings:
    return load_settings()


@functools.cache
def _redis() -> Any:
    from headwater.fleet.context import redis_client

    return redis_client(_settings())


@app.task(name=names.CONSOLIDATE, acks_late=True, ignore_result=True)
def consolidate_collection(collection: str) -> None:
    def again(countdown: float) -> None:
        app.send_task(names.CONSOLIDATE, args=[collection], countdown=countdown, queue=names.CONSOLIDATE_QUEUE)

    fleet_consolidate(_redis(), _settings(), collection, resend=again)


@app.task(name=names.CONSOLIDATE_SWEEP, acks_late=True, ignore_result=True)
def consolidate_sweep() -> None:
    from headwater.chroma_store import make_client

    for collection in data_collections(make_client(_settings(), fleet=True)):
        app.send_task(names.CONSOLIDATE, args=[collection], queue=names.CONSOLIDATE_QUEUE)

"""Celery tasks of the consolidation queue: thin wrappers over headwater.consolidation.stage."""

from __future__ import annotations

import functools
from typing import Any

from celery import shared_task

from headwater.settings import Settings, load_settings
from headwater import queues as names
from headwater.consolidation.stage import data_collections, fleet_consolidate
from workers.sending import sender


@functools.cache
def _settings() -> Settings:
    return load_settings()


@functools.cache
def _redis() -> Any:
    from headwater.redis_connection import redis_client

    return redis_client(_settings())


@shared_task(name=names.CONSOLIDATE, acks_late=True, ignore_result=True)
def consolidate_collection(collection: str) -> None:
    def again(countdown: float) -> None:
        sender()(names.CONSOLIDATE, [collection], countdown=countdown)

    fleet_consolidate(_redis(), _settings(), collection, resend=again)


@shared_task(name=names.CONSOLIDATE_SWEEP, acks_late=True, ignore_result=True)
def consolidate_sweep() -> None:
    from headwater.store.chroma_store import make_client

    for collection in data_collections(make_client(_settings(), fleet=True)):
        sender()(names.CONSOLIDATE, [collection])

"""The task beat sends for a source's schedule: a full run, unless one of the source is still going."""

from __future__ import annotations

import functools
import logging
from typing import Any

from celery import shared_task

from headwater.fleet.context import Fleet
from headwater.fleet.runs import Target
from headwater.models import Trigger
from headwater.settings import load_settings
from schedules.source_schedules import SCHEDULED_SYNC, start_unless_busy
from workers.sending import sender

log = logging.getLogger(__name__)


@functools.cache
def _fleet() -> Fleet:
    return Fleet(load_settings(), sender())


@shared_task(name=SCHEDULED_SYNC, acks_late=True, ignore_result=True)
def scheduled_sync(spec: dict[str, Any], target: dict[str, str]) -> str | None:
    run_id, busy = start_unless_busy(_fleet(), spec, Target(**target), trigger=Trigger.SCHEDULE)
    if run_id is None:
        log.info("scheduled run of %s skipped: run %s has not finished", spec["id"], busy)
    else:
        log.info("scheduled run %s of %s queued", run_id, spec["id"])
    return run_id

"""Per-source schedules: an interval or a cron line in a source's config, as Celery schedule objects.

The same objects drive both modes: Celery beat with the schedule kept in Redis (celery-redbeat,
so a source added through the API is scheduled without restarting beat) for a fleet, and the
in-process scheduler of embedded `headwater serve`. A scheduled run starts only when the source
has no unfinished run (checked under a non-blocking lock), and a missed run is dropped rather than
queued behind the next one, so an outage never leaves a pile of runs behind it.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from celery.schedules import crontab, schedule

from headwater.cron import check_cron

from headwater.sources.model import SourceConfig

SCHEDULED_SYNC = "headwater.scheduled_sync"
ENTRY_PREFIX = "source:"
# Held only while a trigger checks for an unfinished run and creates one: never across the run.
TRIGGER_LOCK = "headwater:trigger-lock:{}"
TRIGGER_LOCK_SECONDS = 30


def parse_cron(line: str) -> crontab:
    """A 5-field cron line (minute hour day-of-month month day-of-week) as a Celery crontab; ValueError if invalid.

    Whether a line is valid is headwater.cron's to say (the source model checks lines where Celery
    is not imported); tests/unit/test_cron.py checks Celery agrees on every line it accepts.
    """
    check_cron(line)
    minute, hour, day_of_month, month_of_year, day_of_week = line.split()
    return crontab(minute=minute, hour=hour, day_of_month=day_of_month, month_of_year=month_of_year,
                   day_of_week=day_of_week)


def source_schedule(source: SourceConfig) -> Any | None:
    """The Celery schedule of a source, or None when it has none."""
    if source.schedule_cron:
        return parse_cron(source.schedule_cron)
    if source.schedule_interval_seconds:
        return schedule(timedelta(seconds=source.schedule_interval_seconds))
    return None


def schedule_spec(source: SourceConfig) -> str | None:
    """The source's schedule as one comparable string (`cron:...` or `every:SECONDS`), or None."""
    if source.schedule_cron:
        return f"cron:{' '.join(source.schedule_cron.split())}"
    if source.schedule_interval_seconds:
        return f"every:{source.schedule_interval_seconds:g}"
    return None


def seconds_between(every: Any) -> float:
    """How long a scheduled message may wait before it is dropped: one period (a minute for cron lines)."""
    if isinstance(every, crontab):
        return 60.0
    return max(1.0, every.run_every.total_seconds())


def busy_run(runs: list[Any]) -> Any | None:
    """The unfinished run among these (newest first), if any."""
    return next((r for r in runs if not r.status.finished), None)


def start_unless_busy(fleet: Any, spec: dict[str, Any], target: Any, *, allow_mass_delete: bool = False,
                      trigger: Any = "manual") -> tuple[str | None, str | None]:
    """Queue a full run of the source unless it has an unfinished one: (new run id, None) or (None, busy run id).

    A non-blocking Redis lock covers the check and the creation, so a scheduled trigger and a
    manual one arriving together cannot both start a run; whoever loses sees the winner's run.
    """
    from headwater.fleet.enqueue import enqueue_sync

    from headwater.redis_connection import release_quietly

    source_id = spec["id"]
    lock = fleet.redis.lock(TRIGGER_LOCK.format(source_id), timeout=TRIGGER_LOCK_SECONDS, blocking=False)
    if not lock.acquire():
        return None, "(another trigger of this source is in progress)"
    try:
        busy = busy_run(fleet.runs.list(200, source_id))
        if busy is not None:
            return None, busy.id
        return enqueue_sync(fleet, spec, target, allow_mass_delete=allow_mass_delete, trigger=trigger), None
    finally:
        release_quietly(lock, f"the trigger of {source_id}")


# Redbeat entries ---------------------------------------------------------------------------


def entry_name(source_id: str) -> str:
    return ENTRY_PREFIX + source_id


def save_entry(app: Any, source: SourceConfig, spec: dict[str, Any], target: dict[str, str]) -> None:
    """Create or update the source's entry in the Redis-kept beat schedule (beat sees it on its next tick).

    An entry whose period is unchanged keeps when it last ran, and so when it runs next: serve saves
    every declared source's entry when it starts, and a serve redeployed more often than an interval
    must not push that interval's run back each time. A new or changed period starts now.
    """
    from redbeat import RedBeatSchedulerEntry

    from headwater import queues as names

    every = source_schedule(source)
    if every is None:
        delete_entry(app, source.id)
        return
    entry = RedBeatSchedulerEntry(entry_name(source.id), SCHEDULED_SYNC, every, args=[spec, target],
                                  options={"queue": names.SYNC_QUEUE, "expires": seconds_between(every)}, app=app)
    existing = _entry(app, source.id)
    if existing is not None and existing.schedule == every:
        _replace_definition(app, entry)
        return
    delete_entry(app, source.id)
    entry.save()


def delete_entry(app: Any, source_id: str) -> None:
    from redbeat import RedBeatSchedulerEntry

    try:
        RedBeatSchedulerEntry.from_key(_key(app, source_id), app=app).delete()
    except KeyError:
        pass


def next_run_at(app: Any, source_id: str) -> float | None:
    """When beat will next fire the source's entry (epoch seconds), if it has one.

    Beat looks at an entry once its score in the schedule's sorted set is due, and fires it when the
    entry's schedule says so. The score is the truth of when beat looks (an entry's `due_at` is not:
    it adds the time remaining as of now to the last run, so it drifts into the past as a period goes
    by), but redbeat writes it truncated to the second, and a hair early: a cron entry due at 03:00:00
    scores 02:59:59. The schedule's remaining time from the last run, counted from now, gives the
    exact moment back; it is never earlier than the score, since beat does not look before then.
    """
    from redbeat.schedulers import ensure_conf, get_redis

    score = get_redis(app).zscore(ensure_conf(app).schedule_key, _key(app, source_id))
    if score is None or score < 0:
        return None
    entry = _entry(app, source_id)
    if entry is None or entry.last_run_at is None:
        return float(score)
    remaining = entry.schedule.remaining_estimate(entry.last_run_at).total_seconds()  # as of a moment ago...
    # ...so added to now it is a hair late, never early; to the millisecond, a cron minute's exact second.
    return max(float(score), round(time.time() + remaining, 3))


def _entry(app: Any, source_id: str) -> Any | None:
    from redbeat import RedBeatSchedulerEntry

    try:
        return RedBeatSchedulerEntry.from_key(_key(app, source_id), app=app)
    except KeyError:
        return None


def _replace_definition(app: Any, entry: Any) -> None:
    """Write an entry's definition (what it runs, with which arguments) and leave its run times alone.

    RedBeatSchedulerEntry.save() would also score the entry from its `due_at`, which is only
    right just after a run; the score beat wrote when it last fired stays.
    """
    import json

    from redbeat.decoder import RedBeatJSONEncoder
    from redbeat.schedulers import get_redis

    definition = {"name": entry.name, "task": entry.task, "args": entry.args, "kwargs": entry.kwargs,
                  "options": entry.options, "schedule": entry.schedule, "enabled": entry.enabled}
    get_redis(app).hset(entry.key, "definition", json.dumps(definition, cls=RedBeatJSONEncoder))


def _key(app: Any, source_id: str) -> str:
    from redbeat.schedulers import ensure_conf

    return ensure_conf(app).key_prefix + entry_name(source_id)

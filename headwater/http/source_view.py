"""What the dashboard's page of one source shows: its settings as they were written, its schedule and
next run, its runs (with trigger, duration and counters), and the failed and skipped documents of its
latest finished run with their reasons. Reads only; source_actions changes things."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from headwater.sources.intervals import format_interval

RUNS_SHOWN = 20


def schedule_text(config: Any) -> str:
    """A source's schedule in words: `every 2h`, `cron 0 3 * * * (UTC)` or `manual`."""
    if config.schedule_cron:
        return f"cron {config.schedule_cron} (UTC)"
    if config.schedule_interval_seconds:
        return f"every {format_interval(config.schedule_interval_seconds)}"
    return "manual"


def run_seconds(run: dict[str, Any], now: float | None = None) -> float | None:
    """How long a run took (or has taken so far); None before it started."""
    started = run.get("started_at") or None
    if started is None:
        return None
    end = run.get("finished_at") or (None if run.get("finished") else (now or time.time()))
    return None if end is None else max(0.0, float(end) - float(started))


def duration_text(seconds: float | None) -> str:
    """`0.4 s`, `12 s`, `3 min 5 s`, `2 h 10 min`; an em dash when unknown."""
    if seconds is None:
        return "—"
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = int(round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def form_values(config: Any) -> dict[str, Any]:
    """The edit form's values of a stored source: intervals as a person writes them (`2h`, not 7200.0)."""
    values = config.model_dump()
    values["schedule_interval_seconds"] = format_interval(config.schedule_interval_seconds)
    return values


def latest_finish(times: Iterable[float | None]) -> float | None:
    """The latest of some runs' finish times (None when none has finished)."""
    return max((t for t in times if t), default=None)


def source_context(svc: Any, source: Any, counts_max_age: float = 1.0) -> dict[str, Any]:
    """Everything the source page shows besides its form (its document and chunk counts at most
    `counts_max_age` seconds old: the page is opened after runs, the polled panel reads the cache)."""
    runs = svc.backend.list_runs(RUNS_SHOWN, source.id)
    now = time.time()
    for run in runs:
        run["duration"] = duration_text(run_seconds(run, now))
    latest = next((r for r in runs if r["finished"]), None)
    paused_at = svc.store.paused_schedules().get(source.id)
    scheduled = bool(source.config.schedule_interval_seconds or source.config.schedule_cron)
    counts = svc.stats.source_summary(counts_max_age, fresh_after=latest_finish(
        r.get("finished_at") for r in runs if r["finished"])).get(source.id, {})
    return {"runs": runs, "latest": latest, "paused_at": paused_at, "scheduled": scheduled,
            "schedule": schedule_text(source.config),
            "next_run_at": None if paused_at or not scheduled else svc.backend.next_run_at(source.id),
            "source_collection": source.config.collection or svc.settings.collection,
            "documents": counts.get("documents", 0), "chunks": counts.get("chunks", 0)}


def deletion_context(svc: Any, source: Any) -> dict[str, Any]:
    """What deleting the source would leave or remove: its documents and chunks in the collection it writes."""
    collection = source.config.collection or svc.settings.collection
    try:
        counts = svc.backend.store_for(source.config.collection).source_summary().get(source.id, {})
    except Exception:  # noqa: BLE001  (no such collection yet: nothing was ever written)
        counts = {}
    return {"source_collection": collection, "documents": counts.get("documents", 0),
            "chunks": counts.get("chunks", 0)}

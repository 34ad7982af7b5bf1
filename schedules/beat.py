"""The beat schedule, as data, and the beat process: `headwater beat` runs Celery's own beat with it.

The sweeper re-drives expired leases (lost workers, lost messages). Each entry expires after one
interval, so a beat that ran while no worker listened does not leave a pile of sweeps behind, and
the sweep itself holds a non-blocking lock, so two sweeps never overlap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from headwater.settings import Settings
from headwater import queues as names


def beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    """Celery's beat_schedule for these settings."""
    from headwater.consolidation.config import ConsolidationSettings

    every = settings.sweep_interval_seconds
    consolidate_every = ConsolidationSettings().sweep_interval_seconds
    return {
        "sweep-fleet-leases": {
            "task": names.SWEEP,
            "schedule": every,
            "options": {"queue": names.ROUTES[names.SWEEP], "expires": every},
        },
        # Every collection consolidated now and then: what a lost trigger missed, orphans included.
        "sweep-consolidation": {
            "task": names.CONSOLIDATE_SWEEP,
            "schedule": consolidate_every,
            "options": {"queue": names.ROUTES[names.CONSOLIDATE_SWEEP], "expires": consolidate_every},
        },
    }


def run_beat(settings: Settings, schedule_file: Path) -> None:
    """Run Celery beat with this schedule on redbeat until stopped (blocks). Run exactly one."""
    from headwater.observability import setup
    from workers.celery_app import create_app

    setup(settings, "beat")
    app = create_app(settings)
    app.conf.beat_schedule = beat_schedule(settings)
    schedule_file.parent.mkdir(parents=True, exist_ok=True)
    app.start(["beat", "--schedule", str(schedule_file), "--loglevel", "INFO"])

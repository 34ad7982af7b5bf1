"""The beat schedule, as data. `headwater beat` runs Celery's own beat with it.

The sweeper re-drives expired leases (lost workers, lost messages). Each entry expires after one
interval, so a beat that ran while no worker listened does not leave a pile of sweeps behind, and
the sweep itself holds a non-blocking lock, so two sweeps never overlap.
"""

from __future__ import annotations

from typing import Any

from headwater.settings import Settings
from workers import names


def beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    """Celery's beat_schedule for these settings."""
    every = settings.sweep_interval_seconds
    return {
        "sweep-fleet-leases": {
            "task": names.SWEEP,
            "schedule": every,
            "options": {"queue": names.ROUTES[names.SWEEP], "expires": every},
        },
    }

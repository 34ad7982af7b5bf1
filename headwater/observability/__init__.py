"""Operations: error reports (Sentry), Prometheus metrics and structured logs for every Headwater process.

`setup(settings, component)` is called once by each long-running command (serve, worker, beat; a
worker also connects its Celery signals, workers.celery_hooks);
each part is off unless configured, and none of them ever sends or prints a secret.
"""

from __future__ import annotations

from headwater.settings import Settings


def setup(settings: Settings, component: str) -> None:
    """Logs, Sentry (when HEADWATER_SENTRY_DSN is set) and worker metrics for this process."""
    from headwater.observability import logs, sentry

    logs.configure(settings, component)
    sentry.init(settings, component)

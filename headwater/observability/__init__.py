"""Operations: error reports (Sentry), Prometheus metrics and structured logs for every Headwater process.

`setup(settings, component)` is called once by each long-running command (serve, worker, beat);
each part is off unless configured, and none of them ever sends or prints a secret.
"""

from __future__ import annotations

from headwater.settings import Settings


def setup(settings: Settings, component: str) -> None:
    """Logs, Sentry (when HEADWATER_SENTRY_DSN is set) and worker metrics for this process."""
    from headwater.observability import logs, sentry

    logs.configure(settings, component)
    sentry.init(settings, component)
    if component == "worker":
        from headwater.observability import celery_hooks

        celery_hooks.connect(settings)


def start_worker_metrics(settings: Settings, queues: str | None) -> None:
    """With HEADWATER_METRICS_PORT: the pool's shared samples directory now, and /metrics once Celery starts.

    Called before anything imports prometheus_client (the directory decides its storage).
    """
    if settings.metrics_port is None:
        return
    from headwater.observability.multiproc import prepare_multiprocess_dir

    prepare_multiprocess_dir(settings.metrics_dir)
    from celery import signals

    from headwater.observability import metrics
    from workers import names

    served = queues.split(",") if queues else list(names.ALL_QUEUES)

    def serve(**_: object) -> None:  # in the main process, once the worker is up
        metrics.serve_worker_metrics(settings.metrics_port, served, settings.redis_url.get_secret_value())

    signals.worker_init.connect(serve, weak=False)

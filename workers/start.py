"""Starting a worker process: metrics and logs first, then the Celery app, its signals and its pool."""

from __future__ import annotations

from headwater import queues as names
from headwater.settings import Settings


def run_worker(settings: Settings, queues: list[str], concurrency: int) -> None:
    """Serve these queues until stopped (blocks)."""
    from headwater.observability import setup
    from workers import celery_hooks

    celery_hooks.start_worker_metrics(settings, ",".join(queues))  # before anything imports prometheus_client
    setup(settings, "worker")
    celery_hooks.connect(settings)
    from workers.celery_app import create_app

    unknown = sorted(set(queues) - set(names.ALL_QUEUES))
    if unknown:
        raise ValueError(f"unknown queues {', '.join(unknown)}; known: {', '.join(names.ALL_QUEUES)}")
    create_app(settings).worker_main(["worker", "-Q", ",".join(queues), "-c", str(concurrency), "--loglevel", "INFO",
                                      "--without-gossip", "--without-mingle"])

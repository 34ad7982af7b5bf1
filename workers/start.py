"""Starting a worker process: metrics and logs first, then the Celery app, its signals and its pool."""

from __future__ import annotations

import os
import socket

from headwater import queues as names
from headwater.settings import Settings


def worker_name(name: str | None = None) -> str:
    """NAME@HOST, unique per process by default: two workers on one host must not share a name, or the
    fleet counts them as one and the loss of either goes unseen."""
    if name and "@" in name:
        return name
    return f"{name or f'headwater-{os.getpid()}'}@{socket.gethostname()}"


def run_worker(settings: Settings, queues: list[str], concurrency: int, name: str | None = None,
               pool: str = "prefork") -> None:
    """Serve these queues until stopped (blocks): prefork for CPU work, threads for I/O-bound work (an
    embedding endpoint's dense pool)."""
    from headwater.observability import setup
    from workers import celery_hooks

    celery_hooks.start_worker_metrics(settings, ",".join(queues))  # before anything imports prometheus_client
    setup(settings, "worker")
    celery_hooks.connect(settings)
    from workers.celery_app import create_app

    unknown = sorted(set(queues) - set(names.ALL_QUEUES))
    if unknown:
        raise ValueError(f"unknown queues {', '.join(unknown)}; known: {', '.join(names.ALL_QUEUES)}")
    if pool not in ("prefork", "threads"):
        raise ValueError(f"unknown pool {pool!r}; use prefork or threads")
    from workers import heartbeat

    full_name = worker_name(name)
    heartbeat.start(settings, full_name, queues, concurrency)
    create_app(settings).worker_main(["worker", "-Q", ",".join(queues), "-c", str(concurrency), "-P", pool, "-n", full_name,
                                      "--loglevel", "INFO", "--without-gossip", "--without-mingle"])

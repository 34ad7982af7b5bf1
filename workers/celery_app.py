"""The Celery application: configuration from Settings, JSON only, delivery that survives dead workers.

Built when a process starts (a worker, beat, or a process that enqueues), never at import: the
tasks are shared tasks that bind to whichever app the process made.
"""

from __future__ import annotations

from celery import Celery

from headwater import queues as names
from headwater.settings import Settings
from workers.broker_transport import broker_transport


def create_app(settings: Settings) -> Celery:
    """A Celery app for these settings (broker and result-free; tasks never wait on each other)."""
    broker = settings.redis_url.get_secret_value()
    app = Celery("headwater", broker=broker, include=["workers.tasks", "workers.consolidate_tasks", "schedules.tasks"])
    app.conf.update(
        # A worker must survive Redis going away (workers.broker_transport).
        broker_transport=broker_transport(broker),
        task_serializer="json", accept_content=["json"], result_serializer="json",
        task_ignore_result=True, result_backend=None,
        task_routes={task: {"queue": queue} for task, queue in names.ROUTES.items()},
        task_default_queue=names.SYNC_QUEUE,
        # A task is acknowledged after it ran, and a pool child that dies (OOM, SIGKILL) puts it
        # back. Liveness does not depend on either: every pending step is a lease that the sweeper
        # re-drives (headwater.fleet.state); a replayed message finds its step done or held.
        task_acks_late=True, task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,  # a slow document must not hold others hostage in a prefetch
        broker_transport_options={
            # Unacknowledged messages return to the queue after this long (a late copy of a step the
            # sweeper already re-drove; it finds the step done). Keep it above the longest task.
            "visibility_timeout": settings.visibility_timeout_seconds,
            # How often kombu looks for messages of dead workers to restore (default 60 s).
            "unacked_restore_interval": 5,
        },
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        # The beat schedule lives in Redis (celery-redbeat): per-source entries written by the HTTP
        # app are picked up on beat's next tick, with no restart; one beat holds the lock at a time.
        beat_scheduler="schedules.redbeat_scheduler:HeadwaterScheduler",
        redbeat_redis_url=settings.redis_url.get_secret_value(),
        redbeat_key_prefix="headwater:redbeat:",
        redbeat_redis_options={"health_check_interval": 30},
        beat_max_loop_interval=settings.beat_max_loop_interval_seconds,
        redbeat_lock_timeout=max(30, int(6 * settings.beat_max_loop_interval_seconds)),
    )
    return app


"""The Redis client every Headwater process builds from its settings (queues, fleet state, locks, write logs)."""

from __future__ import annotations

import logging
from typing import Any

from headwater.settings import Settings

log = logging.getLogger(__name__)


def redis_client(settings: Settings) -> Any:
    """A Redis client for the configured URL."""
    import redis

    return redis.Redis.from_url(settings.redis_url.get_secret_value(), health_check_interval=30)


def release_quietly(lock: Any, what: str) -> None:
    """Release a redis-py Lock; one that expired while held is logged (the work outlived its lock), not raised."""
    from redis.exceptions import LockError

    try:
        lock.release()
    except LockError:
        log.warning("%s outlived its lock, which expired before the end: another run of it may have started", what)

"""Liveness of the beat (`python -m headwater.observability.beat_alive`): exit 0 while it holds its lock.

Celery beat on redbeat renews a lock in Redis on every tick and the lock expires a few ticks after
the last renewal, so a beat that hangs or lost Redis shows as a missing lock; Kubernetes and compose
restart it. There is exactly one beat, so the lock is always the running beat's.
"""

from __future__ import annotations

import sys

LOCK_KEY = "headwater:redbeat::lock"  # redbeat_key_prefix (workers/celery_app.py) + ":lock"


def alive(redis_url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(redis_url, socket_timeout=5).exists(LOCK_KEY))
    except Exception:  # noqa: BLE001  (no Redis: the beat cannot be doing its job either)
        return False


def main() -> int:
    from headwater.settings import load_settings

    return 0 if alive(load_settings().redis_url.get_secret_value()) else 1


if __name__ == "__main__":
    sys.exit(main())

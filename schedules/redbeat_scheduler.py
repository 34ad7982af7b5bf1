"""Celery beat's scheduler: celery-redbeat (the schedule lives in Redis), made to survive Redis itself.

Redis holds nothing that cannot be recomputed, so it may restart empty or be unreachable for a
while. Stock redbeat then dies (its lock is gone, or a tick cannot reach Redis) and the fleet's
sweeper would stop with it. This scheduler waits out an outage, takes its lock again when Redis
came back empty (or stops, if another beat took it meanwhile), and reinstalls the static entries
(the sweeper); per-source entries are put back by `headwater serve`, which keeps them durably.
"""

from __future__ import annotations

import logging

from redbeat import RedBeatScheduler
from redbeat.schedulers import get_redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import LockError, TimeoutError as RedisTimeoutError

log = logging.getLogger(__name__)
OUTAGE_RETRY_SECONDS = 1.0


class HeadwaterScheduler(RedBeatScheduler):
    def tick(self, min=min, **kwargs):  # noqa: A002, ANN001, ANN003, ANN201  (celery's signature)
        try:
            self._keep_lock()
            self._restore_static_entries()
            remaining = []
            for entry in self.schedule.values():
                next_time = self.maybe_due(entry, **self._maybe_due_kwargs)
                if next_time:
                    remaining.append(next_time)
            return min(remaining + [self.max_interval])
        except (RedisConnectionError, RedisTimeoutError) as exc:
            log.warning("beat: Redis unreachable (%s); trying again in %ss", type(exc).__name__, OUTAGE_RETRY_SECONDS)
            return OUTAGE_RETRY_SECONDS

    def _keep_lock(self) -> None:
        if not self.lock_key or self.lock is None:
            return
        try:
            self.lock.extend(int(self.lock_timeout))
        except LockError:
            # The lock vanished (Redis restarted empty, or it expired during an outage).
            if not self.lock.acquire(blocking=False):
                raise SystemExit("beat: another beat holds the schedule lock now; this one stops") from None
            log.warning("beat: schedule lock taken again after Redis lost it")

    def _restore_static_entries(self) -> None:
        conf = self.app.redbeat_conf
        if conf.schedule and not get_redis(self.app).exists(conf.statics_key):
            log.warning("beat: the schedule in Redis is gone; reinstalling the static entries")
            self.setup_schedule()

    def close(self) -> None:
        try:
            super().close()
        except (RedisConnectionError, RedisTimeoutError, LockError):
            log.warning("beat: could not release the schedule lock (Redis unreachable); it expires on its own")

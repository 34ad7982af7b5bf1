"""kombu's Redis transport, with one of its failures turned into the connection error it is.

When Redis goes away while a worker holds unacknowledged messages (every running task, with late
acknowledgement, and every task waiting for its countdown), Celery closes the connection and then
its channel; the channel, restoring those messages, asks for connection parameters from a
connection that no longer has a client, and kombu raises AttributeError. Celery treats that as
unrecoverable and the worker exits, where a lost connection should only mean reconnecting (the
messages come back anyway: their copies in Redis return after the visibility timeout). Raising
the Redis ConnectionError instead lets Celery's own handling of connection errors take over.
"""

from __future__ import annotations

from typing import Any

import redis
from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        if self.connection.client is None:
            raise redis.exceptions.ConnectionError("the broker connection was closed while a channel was closing")
        return super()._connparams(asynchronous)


class Transport(kombu_redis.Transport):
    Channel = Channel


def broker_transport(url: str) -> str | None:
    """This transport for plain redis:// brokers; None (kombu's choice by scheme) for any other."""
    return f"{__name__}:Transport" if url.startswith("redis://") else None

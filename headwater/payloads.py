"""Where document bytes and in-between results live while a run is in flight: Redis, with a TTL.

Messages carry only keys. A 200 MB document would make a 270 MB (base64) message that every
broker hop copies and that a redelivery sends again; a key is 60 bytes. Payloads expire on their
own, so a lost run leaves nothing behind, and losing Redis loses only work in flight, which the
next reconciliation pass redoes.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

_PREFIX = "headwater:payload:"
_PART = 8 * 1024 * 1024  # Redis strings are capped at 512 MB; parts keep each write small


class PayloadStore:
    def __init__(self, redis: Any, ttl_seconds: int) -> None:
        self.redis = redis
        self.ttl = ttl_seconds

    def put_bytes(self, namespace: str, data: bytes) -> str:
        """Store bytes under a content-derived key (re-storing the same bytes is free); returns the key."""
        key = f"{_PREFIX}{namespace}:{hashlib.sha256(data).hexdigest()}"
        parts = [data[i:i + _PART] for i in range(0, len(data), _PART)] or [b""]
        pipe = self.redis.pipeline()
        pipe.delete(key)
        pipe.rpush(key, *parts)
        pipe.expire(key, self.ttl)
        pipe.execute()
        return key

    def get_bytes(self, key: str) -> bytes | None:
        parts = self.redis.lrange(key, 0, -1)
        return b"".join(parts) if parts else None

    def put_json(self, key: str, value: Any) -> str:
        self.redis.set(_PREFIX + key, json.dumps(value), ex=self.ttl)
        return _PREFIX + key

    def get_json(self, key: str) -> Any | None:
        raw = self.redis.get(key)
        return json.loads(raw) if raw is not None else None

    def delete(self, *keys: str) -> None:
        if keys:
            self.redis.delete(*keys)

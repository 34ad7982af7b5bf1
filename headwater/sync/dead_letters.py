"""Event messages Headwater could not read, kept with their reason: a JSON-lines file next to an embedded
Chroma, or a capped Redis list per source in a fleet. Recording one never blocks the event queue."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

KEEP = 1000  # newest dead letters kept per source in Redis


class FileDeadLetters:
    """Appends {source, message_id, reason, body, at} lines to one file (embedded mode)."""

    def __init__(self, path: Path, source_id: str) -> None:
        self.path, self.source_id = path, source_id
        self._lock = threading.Lock()

    def __call__(self, message_id: str, reason: str, body: str) -> None:
        line = json.dumps({"source": self.source_id, "message_id": message_id, "reason": reason, "body": body,
                           "at": time.time()})
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(line + "\n")

    def entries(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        rows = [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]
        return [row for row in rows if row.get("source") == self.source_id]


class RedisDeadLetters:
    """LPUSHes the same records to `headwater:source:<id>:dead-letters`, keeping the newest KEEP (fleet)."""

    def __init__(self, redis: Any, source_id: str) -> None:
        from headwater.fleet import keys

        self.redis, self.source_id = redis, source_id
        self.key = keys.source(source_id, "dead-letters")

    def __call__(self, message_id: str, reason: str, body: str) -> None:
        record = json.dumps({"source": self.source_id, "message_id": message_id, "reason": reason, "body": body,
                             "at": time.time()})
        pipe = self.redis.pipeline()
        pipe.lpush(self.key, record)
        pipe.ltrim(self.key, 0, KEEP - 1)
        pipe.execute()

    def entries(self) -> list[dict[str, Any]]:
        return [json.loads(raw) for raw in self.redis.lrange(self.key, 0, -1)]


def dead_letter_file(chroma_path: Path) -> Path:
    """Where embedded mode keeps dead letters: beside the Chroma directory (.headwater/dead-letters.jsonl)."""
    return Path(chroma_path).parent / "dead-letters.jsonl"

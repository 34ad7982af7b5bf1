"""Server mode's sparse index, kept current: writers log each write, searchers follow the log.

A Chroma server cannot tell a reader what changed, and local/self-hosted Chroma cannot index
sparse vectors, so every process that searches needs its own derived index. Rebuilding it at
start costs ~12 s per 100,000 chunks and never sees later writes. Instead, every write to a
server collection through Headwater (fleet workers, `headwater sync` against a server) appends
(op, ids) to a Redis stream; a searching process keeps its index on disk with the stream id it
has applied, replays what came after on start and before each query (upserted ids' sparse and
dense vectors are read back from Chroma), and rebuilds only when it cannot trust the replay: the stream was trimmed
past its position, Redis lost the stream, or the counts disagree.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from headwater.retrieval.sparse_index import SparseIndex

log = logging.getLogger(__name__)
STREAM_LENGTH = 1_000_000  # entries kept (approximately); a follower further behind rebuilds
_POSITION = "stream-position.json"
SAVE_SECONDS = 30  # how often a following index is saved while writes come in
AUDIT_SECONDS = 30  # how often its size is compared with the collection's
_GET_PAGE = 2000


def stream_key(collection: str) -> str:
    return f"headwater:col:{collection}:writes"


class WriteLog:
    """ChromaStore write observer: one stream entry per write call (ids only; vectors stay in Chroma)."""

    def __init__(self, redis: Any, collection: str) -> None:
        self.redis = redis
        self.key = stream_key(collection)

    def __call__(self, operation: str, ids: Sequence[str], metadatas: Sequence[dict[str, Any]] | None,
                 embeddings: Sequence[Any] | None = None) -> None:
        if operation in ("upsert", "delete") and ids:
            self.redis.xadd(self.key, {"op": operation, "ids": json.dumps(list(ids))},
                            maxlen=STREAM_LENGTH, approximate=True)


class FollowedIndex:
    """A sparse index on disk that follows a collection's write log."""

    def __init__(self, store: Any, redis: Any, directory: Path, min_interval: float = 0.5,
                 audit_seconds: float = AUDIT_SECONDS) -> None:
        self.store = store
        self.redis = redis
        self.directory = Path(directory)
        self.key = stream_key(store.collection.name)
        self.min_interval = min_interval
        self.audit_seconds = audit_seconds
        self.rebuilt = False  # whether opening had to rebuild (for tests and benchmarks)
        self._checked = self._audited = self._saved = time.monotonic()
        self._unsaved = 0
        self.position = "0-0"
        self.index = self._open()

    def _open(self) -> SparseIndex:
        index = SparseIndex.load(self.directory)
        position = self._saved_position()
        if index is not None and position is not None and self._replayable(position):
            index.dirty_marker = False  # what it has not saved is replayed from the log after a restart
            self.index, self.position = index, position
            self._replay()
            if len(self.index) == self.store.count():
                return self.index
            log.warning("sparse index of %s disagrees with the collection after replay; rebuilding", self.key)
        return self._rebuild()

    def _rebuild(self) -> SparseIndex:
        # The position is taken before the collection is read: writes during the rebuild are
        # replayed afterwards (replays are idempotent: an upsert re-indexes by id).
        self.position = self._stream_end()
        self.index = SparseIndex.rebuild(self.store.collection, self.directory)
        self.index.dirty_marker = False
        self.rebuilt = True
        self._replay()
        self.save()
        return self.index

    def refresh(self) -> SparseIndex:
        """Apply what was written since the last look (at most every min_interval seconds)."""
        now = time.monotonic()
        if now - self._checked < self.min_interval:
            return self.index
        self._checked = now
        if not self._replayable(self.position):
            log.warning("write log of %s lost or trimmed past this index; rebuilding", self.key)
            return self._rebuild()
        self._unsaved += self._replay()
        if now - self._audited >= self.audit_seconds:
            # Writes that bypassed the log (another tool writing the collection) show up as a count gap.
            self._audited = now
            if len(self.index) != self.store.count():
                log.warning("sparse index of %s disagrees with the collection; rebuilding", self.key)
                return self._rebuild()
        if self._unsaved and now - self._saved >= SAVE_SECONDS:
            self.save()
        return self.index

    def save(self) -> None:
        """Persist the index, then the stream position it includes (a crash between replays a little more)."""
        self.index.mark_changed()
        self.index.persist()
        self._saved, self._unsaved = time.monotonic(), 0
        (self.directory / _POSITION).write_text(json.dumps({"position": self.position,
                                                            "generation": self.index.generation()}))

    def _replay(self) -> int:
        applied = 0
        while True:
            batch = self.redis.xread({self.key: self.position}, count=500)
            if not batch:
                return applied
            for entry_id, fields in batch[0][1]:
                ids = json.loads(fields[b"ids"])
                if fields[b"op"] == b"delete":
                    self.index.delete(ids)
                else:
                    self._upsert(ids)
                self.position = entry_id.decode()
                applied += 1

    def _upsert(self, ids: list[str]) -> None:
        for start in range(0, len(ids), _GET_PAGE):
            # The dense vectors too: the index keeps them for filtered scans (headwater.retrieval.filtered_dense).
            got = self.store.collection.get(ids=ids[start:start + _GET_PAGE], include=["metadatas", "embeddings"])
            self.index.upsert(got["ids"], got["metadatas"], got["embeddings"])

    def _replayable(self, position: str) -> bool:
        """Whether every entry after `position` is still in the stream."""
        info = self._stream_info()
        if info is None:  # no stream: nothing logged yet, or Redis was emptied since
            return position == "0-0"
        first = info.get("first-entry")
        if first is None:
            return True
        return _stream_id(first[0]) <= _next(_stream_id(position))

    def _stream_end(self) -> str:
        info = self._stream_info()
        last = info.get("last-generated-id") if info else None
        return last.decode() if isinstance(last, bytes) else str(last or "0-0")

    def _stream_info(self) -> dict | None:
        """XINFO STREAM of the log, or None when there is no stream (Redis answers "no such key")."""
        from redis.exceptions import ResponseError

        try:
            return self.redis.xinfo_stream(self.key)
        except ResponseError as exc:
            if "no such key" in str(exc).lower():
                return None
            raise

    def _saved_position(self) -> str | None:
        try:
            saved = json.loads((self.directory / _POSITION).read_text())
        except (OSError, ValueError):
            return None
        if saved.get("generation") != SparseIndex.saved_generation(self.directory):
            return None
        return saved["position"]


def _stream_id(value: Any) -> tuple[int, int]:
    text = value.decode() if isinstance(value, bytes) else str(value)
    millis, _, seq = text.partition("-")
    return int(millis), int(seq or 0)


def _next(entry: tuple[int, int]) -> tuple[int, int]:
    return entry[0], entry[1] + 1


def write_log_if_reachable(redis_url: str, collection: str) -> WriteLog | None:
    """The fleet's write log for `collection` when its Redis answers, so searchers that follow the server see a copy."""
    import redis

    client = redis.Redis.from_url(redis_url, socket_connect_timeout=2)
    try:
        client.ping()
    except Exception as exc:  # noqa: BLE001  (no fleet yet: searchers rebuild from the collection when they start)
        log.info("no Redis for the write log (%s)", type(exc).__name__)
        return None
    return WriteLog(client, collection)

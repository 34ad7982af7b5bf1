"""Upsert stage: writes gathered across documents and flushed in batches no larger than the store's limit.

Within a flush, new records go first, then metadata updates, then deletes, so a document
being replaced is never missing from the collection and a write cut short leaves records the
next sync recognises as incomplete (see StoredDocument.complete).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from headwater.chroma_store import ChromaStore
from headwater.models import ChunkRecord


@dataclass
class BatchWriter:
    store: ChromaStore
    records: list[ChunkRecord] = field(default_factory=list)
    updates: dict[str, dict[str, Any]] = field(default_factory=dict)
    deletes: list[str] = field(default_factory=list)
    written: int = 0

    def upsert(self, records: list[ChunkRecord]) -> None:
        self.records.extend(records)
        if len(self.records) >= self.store.batch_limit:
            self.flush()

    def update(self, record_id: str, metadata: dict[str, Any]) -> None:
        self.updates[record_id] = metadata

    def delete(self, ids: list[str]) -> None:
        self.deletes.extend(ids)

    def flush(self) -> None:
        """Write everything pending, in store-limited batches."""
        if self.records:
            records, self.records = self.records, []
            self.store.upsert([r.id for r in records], [r.text for r in records],
                              [r.embedding for r in records], [r.metadata for r in records])
            self.written += len(records)
        if self.updates:
            updates, self.updates = self.updates, {}
            self.store.update_metadata(list(updates), list(updates.values()))
        if self.deletes:
            deletes, self.deletes = self.deletes, []
            self.store.delete(deletes)

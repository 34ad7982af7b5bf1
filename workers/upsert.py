"""Upsert stage: writes gathered across documents and flushed in batches no larger than the store's limit.

Within a flush, new records go first, then metadata updates, then deletes, so a document
being replaced is never missing from the collection and a write cut short leaves records the
next sync recognises as incomplete (see StoredDocument.complete). A batch never holds one id
twice: the last write of an id wins before the batch is sent (Chroma refuses duplicate ids in
one call, and two runs of the same document can meet in one batch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from headwater.chroma_store import ChromaStore
from headwater.models import ChunkRecord


@dataclass
class BatchWriter:
    store: ChromaStore
    records: dict[str, ChunkRecord] = field(default_factory=dict)
    updates: dict[str, dict[str, Any]] = field(default_factory=dict)
    deletes: dict[str, None] = field(default_factory=dict)  # an ordered set
    written: int = 0

    def upsert(self, records: list[ChunkRecord]) -> None:
        for record in records:
            self.updates.pop(record.id, None)
            self.deletes.pop(record.id, None)
            self.records[record.id] = record
        if len(self.records) >= self.store.batch_limit:
            self.flush()

    def update(self, record_id: str, metadata: dict[str, Any]) -> None:
        """Chroma merges metadata on update (a key set to None is removed); merging here does the same."""
        if record_id in self.deletes:
            return
        if record_id in self.records:
            record = self.records[record_id]
            record.metadata = {**record.metadata, **metadata}
        else:
            self.updates[record_id] = {**self.updates.get(record_id, {}), **metadata}

    def delete(self, ids: list[str]) -> None:
        for record_id in ids:
            self.records.pop(record_id, None)
            self.updates.pop(record_id, None)
            self.deletes[record_id] = None

    def flush(self) -> None:
        """Write everything pending, in store-limited batches."""
        if self.records:
            records, self.records = list(self.records.values()), {}
            self.store.upsert([r.id for r in records], [r.text for r in records],
                              [r.embedding for r in records], [r.metadata for r in records])
            self.written += len(records)
        if self.updates:
            updates, self.updates = self.updates, {}
            self.store.update_metadata(list(updates), list(updates.values()))
        if self.deletes:
            deletes, self.deletes = list(self.deletes), {}
            self.store.delete(deletes)

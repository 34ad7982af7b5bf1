"""Upsert stage: writes gathered across documents and flushed in batches no larger than the store's limit.

Within a flush, new records go first, then metadata updates, then deletes, so a document
being replaced is never missing from the collection and a write cut short leaves records the
next sync recognises as incomplete (see StoredDocument.complete). A batch never holds one id
twice: the last write of an id wins before the batch is sent (Chroma refuses duplicate ids in
one call, and two runs of the same document can meet in one batch).

The documents of a flush have their manifest entries marked incomplete before any of their chunks
are written, and recorded (or removed) only after all of them are (headwater.store.manifest): a flush
cut short anywhere leaves entries the next pass distrusts, so it reads those documents' chunks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from headwater.store.chroma_store import ChromaStore
from headwater.store.manifest import ManifestEntry
from headwater.models import ChunkRecord


@dataclass
class BatchWriter:
    store: ChromaStore
    records: dict[str, ChunkRecord] = field(default_factory=dict)
    updates: dict[str, dict[str, Any]] = field(default_factory=dict)
    deletes: dict[str, None] = field(default_factory=dict)  # an ordered set
    # (source, uri) -> the document's manifest entry after this flush; None removes it.
    entries: dict[tuple[str, str], ManifestEntry | None] = field(default_factory=dict)
    # Called before anything is written (the embedded engine's sparse index must be open by then).
    before_write: Callable[[], object] | None = None
    # Called between the chunk writes and the manifest writes (the fleet's crash point there).
    after_chunks: Callable[[], None] | None = None
    written: int = 0

    def upsert(self, records: list[ChunkRecord]) -> None:
        for record in records:
            self.updates.pop(record.id, None)
            self.deletes.pop(record.id, None)
            self.records[record.id] = record

    def flush_if_full(self) -> None:
        """Flush once a batch's worth of records is pending (called between documents, never within one)."""
        if len(self.records) >= self.store.batch_limit:
            self.flush()

    def document(self, source_id: str, uri: str, entry: ManifestEntry | None) -> None:
        """Record a document's manifest entry (None: remove it) once its queued chunk writes are done."""
        self.entries[(source_id, uri)] = entry

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
        if self.before_write is not None and (self.records or self.updates or self.deletes or self.entries):
            self.before_write()
        entries, self.entries = self.entries, {}
        if entries:
            self.store.manifest.mark_incomplete(list(entries))
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
        if not entries:
            return
        if self.after_chunks is not None:
            self.after_chunks()
        self.store.manifest.write([e for e in entries.values() if e is not None])
        self.store.manifest.remove([doc for doc, e in entries.items() if e is None])

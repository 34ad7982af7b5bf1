"""The one write path: what became of a document, and the writes that make the collection say so.

Both modes decide a document's outcome the same way and hand it to `write_outcome`, so the
embedded engine and the fleet cannot drift: an indexed document adds its new chunks, updates the
metadata of kept ones and deletes stale ones; a touched one (same bytes, new timestamp) only has
its version updated; a skipped, vanished or deleted one loses its chunks; a failed one keeps
whatever was indexed before. (A renamed document is indexed under its new path, whose header its
chunk texts carry, and its old records are deleted.) Each outcome also says what the document's
manifest entry becomes (headwater.store.manifest), which the writer records after the chunk writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from headwater.store import chroma_store as keys
from headwater.store.chroma_store import StoredDocument
from headwater.pipeline.document_plan import DocumentPlan
from headwater.store.manifest import ManifestEntry
from headwater.models import ChunkRecord
from headwater.pipeline.write import BatchWriter

# Terminal document states, shared with the fleet's state machine.
INDEXED, UNCHANGED, SKIPPED, DELETED, FAILED = "indexed", "unchanged", "skipped", "deleted", "failed"


@dataclass
class Outcome:
    """One document's end in a pass, with the writes it needs."""

    uri: str
    state: str
    upserts: list[ChunkRecord] = field(default_factory=list)
    updates: dict[str, dict[str, Any]] = field(default_factory=dict)
    deletes: list[str] = field(default_factory=list)
    reason: str = ""
    source_id: str = ""
    entry: ManifestEntry | None = None  # the document's manifest entry once these writes are done
    forget: bool = False  # the document leaves the collection: its manifest entry goes too

    @property
    def writes(self) -> bool:
        return bool(self.upserts or self.updates or self.deletes or self.entry or self.forget)

    def to_json(self) -> dict[str, Any]:
        return {"uri": self.uri, "state": self.state, "reason": self.reason, "updates": self.updates,
                "deletes": self.deletes, "source_id": self.source_id, "forget": self.forget,
                "entry": self.entry.to_json() if self.entry else None,
                "upserts": [{"id": r.id, "text": r.text, "metadata": r.metadata, "embedding": r.embedding}
                            for r in self.upserts]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Outcome:
        return cls(uri=data["uri"], state=data["state"], reason=data["reason"], updates=data["updates"],
                   deletes=data["deletes"], source_id=data.get("source_id", ""), forget=data.get("forget", False),
                   entry=ManifestEntry(**data["entry"]) if data.get("entry") else None,
                   upserts=[ChunkRecord(r["id"], r["text"], r["metadata"], r["embedding"]) for r in data["upserts"]])


def indexed(plan: DocumentPlan) -> Outcome:
    """New chunks (with their vectors), metadata of kept chunks, and chunks the document no longer has."""
    entry = plan.entry
    return Outcome(entry.uri, INDEXED, upserts=plan.records, updates=plan.updates, deletes=plan.stale,
                   source_id=entry.source_id, entry=entry)


def touched(source_id: str, stored: StoredDocument, doc_version: str, modified_time: float) -> Outcome:
    """Same bytes under a new version (a copied or touched file): only the version moves."""
    fresh = {keys.DOC_VERSION: doc_version, "modified_time": modified_time}
    if stored.metadatas is None:  # read from the manifest: Chroma merges the two keys into each chunk
        updates = {record_id: dict(fresh) for record_id in stored.ids}
    else:
        updates = {record_id: {**metadata, **fresh} for record_id, metadata in stored.by_id().items()
                   if any(metadata.get(k) != v for k, v in fresh.items())}
    if not updates:
        return Outcome(stored.uri, UNCHANGED, source_id=source_id)
    entry = stored.manifest_entry(source_id)
    entry.doc_version = doc_version
    return Outcome(stored.uri, UNCHANGED, updates=updates, source_id=source_id, entry=entry)


def removed(source_id: str, uri: str, stored: StoredDocument | None, state: str, reason: str = "") -> Outcome:
    """Skipped (now empty or unsupported), vanished or deleted: its old chunks would mislead."""
    return Outcome(uri, state, deletes=list(stored.ids) if stored else [], reason=reason, source_id=source_id,
                   forget=stored is not None)


def failed(uri: str, reason: str) -> Outcome:
    """Could not be read or parsed: whatever was indexed before stays."""
    return Outcome(uri, FAILED, reason=reason)


def write_outcome(writer: BatchWriter, outcome: Outcome) -> None:
    """Queue an outcome's writes on a batch writer (which orders, dedupes and bounds them).

    The whole outcome is queued before the writer may flush, so a document's manifest entry is
    never recorded in a flush that lacks some of its chunk writes.
    """
    writer.upsert(outcome.upserts)
    for record_id, metadata in outcome.updates.items():
        writer.update(record_id, metadata)
    writer.delete(outcome.deletes)
    if outcome.entry is not None or outcome.forget:
        writer.document(outcome.source_id, outcome.uri, outcome.entry)
    writer.flush_if_full()

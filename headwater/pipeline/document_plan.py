"""What writing one parsed document means for the collection, decided the same way in every mode.

Given a document's chunks and what the collection holds for it, the plan lists the records to
add (new chunk texts, still without vectors), the metadata updates for chunks that stay, and the
ids that are no longer part of the document.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from headwater.store import chroma_store as keys
from headwater.store.chroma_store import StoredDocument
from headwater.ids import chunk_ids, content_hash
from headwater.store.manifest import ManifestEntry
from headwater.models import Chunk, ChunkRecord, DocumentChange


@dataclass(frozen=True)
class DocumentFacts:
    """The document-level facts every chunk's metadata repeats."""

    source_id: str
    uri: str
    doc_version: str
    doc_hash: str
    modified_time: float
    mime_type: str
    parser: str
    url: str | None = None  # the source's own address of the document (s3://bucket/key), when it has one
    metadata: dict[str, Any] | None = None  # the connector's own keys (a git file's repository and commit)


@dataclass
class DocumentPlan:
    records: list[ChunkRecord] = field(default_factory=list)
    updates: dict[str, dict[str, Any]] = field(default_factory=dict)
    stale: list[str] = field(default_factory=list)
    kept: int = 0
    entry: ManifestEntry | None = None  # the document's manifest entry once the plan is written


def unchanged_by_version(stored: StoredDocument | None, change: DocumentChange) -> bool:
    """Whether the collection already holds this version of the document, completely (no read needed)."""
    return bool(stored and stored.complete and change.version is not None and stored.doc_version == change.version)


def chunk_metadata(facts: DocumentFacts, chunk: Chunk, count: int, title: str | None) -> dict[str, Any]:
    """The metadata one chunk record carries (without its sparse vector)."""
    metadata: dict[str, Any] = {
        keys.SOURCE_ID: facts.source_id, keys.DOC_VERSION: facts.doc_version, keys.DOC_HASH: facts.doc_hash,
        keys.CONTENT_HASH: content_hash(chunk.text), keys.CHUNK_INDEX: chunk.index, keys.CHUNK_COUNT: count,
        "mime_type": facts.mime_type, "parser": facts.parser, "modified_time": facts.modified_time,
        "title": title, "section": chunk.section, "page": chunk.page, "page_end": chunk.page_end,
        "line_start": chunk.line_start, "line_end": chunk.line_end,
        "symbol": chunk.symbol, keys.CHUNKER: chunk.chunker, "url": facts.url,
    }
    # The connector's keys never replace Headwater's own.
    metadata = {**(facts.metadata or {}), **metadata}
    # Absent optional keys are written as None, which Chroma stores as "no such key" and which
    # removes a key an earlier version of the chunk had (Chroma merges metadata on upsert and update).
    return keys.location_metadata(metadata, facts.uri)


def plan_document(facts: DocumentFacts, chunks: list[Chunk], stored: StoredDocument | None) -> DocumentPlan:
    """New records to embed, metadata updates for kept chunks, and stale ids, for one document."""
    ids = chunk_ids(facts.source_id, facts.uri, [c.text for c in chunks])
    existing = stored.by_id() if stored else {}
    title = next((c.title for c in chunks if c.title), None)
    plan = DocumentPlan()
    for record_id, chunk in zip(ids, chunks):
        metadata = chunk_metadata(facts, chunk, len(chunks), title)
        old = existing.get(record_id)
        if old is None:
            plan.records.append(ChunkRecord(record_id, chunk.text, metadata))
            continue
        plan.kept += 1
        if keys.SPARSE in old:
            metadata[keys.SPARSE] = old[keys.SPARSE]
        metadata.update({k: None for k in old if k not in metadata})  # keys this version no longer has
        if any(old.get(k) != v for k, v in metadata.items()):
            plan.updates[record_id] = metadata
    kept = set(ids)
    plan.stale = [i for i in existing if i not in kept]
    chunkers = {c.chunker for c in chunks}
    plan.entry = ManifestEntry(source_id=facts.source_id, uri=facts.uri, doc_version=facts.doc_version,
                               doc_hash=facts.doc_hash, ids=ids,
                               chunker=chunkers.pop() if len(chunkers) == 1 else None)
    return plan


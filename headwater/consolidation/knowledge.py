"""The knowledge collection: one record per consolidated group, with provenance to every chunk.

A record's id is derived from the ids of the chunks behind it (chunk ids change when their text
does), so an unchanged group keeps its record, its decision and its timestamps across passes, and a
changed chunk yields a new group that is decided again. Source chunks carry `knowledge_ids`, the
records they belong to; that pointer is metadata, written with `update()`, and is the only thing
consolidation ever writes to a source collection.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from headwater.store.chroma_store import PAGE, SPARSE

KNOWLEDGE_IDS = "knowledge_ids"  # on a source chunk: the knowledge records it is part of
KIND = "headwater_kind"
KIND_KNOWLEDGE = "knowledge"
# Provenance keys (lists aligned by position: the n-th chunk id came from the n-th uri, ...).
CHUNK_IDS, URIS, SOURCES, VERSIONS = "chunk_ids", "uris", "source_ids", "doc_versions"
DECISION, REASON, METHOD, MODEL, SIMILARITY = "decision", "reason", "method", "model", "similarity"
NEWER, SUPERSEDED, CONFLICTING = "newer_chunk_ids", "superseded_chunk_ids", "conflicting"
DECIDED_AT, PROMPT_VERSION = "decided_at", "prompt_version"
SEARCHABLE = ("duplicate", "supersedes", "complementary", "conflicting")  # "unrelated" records only remember an answer


def knowledge_id(kind: str, members: Sequence[str]) -> str:
    digest = hashlib.sha256(("\x00".join([kind, *sorted(members)])).encode("utf-8")).hexdigest()[:32]
    return f"k-{digest}"


@dataclass
class KnowledgeRecord:
    id: str
    text: str
    embedding: list[float]
    metadata: dict[str, Any]

    @property
    def searchable(self) -> bool:
        return self.metadata.get(DECISION) in SEARCHABLE


def open_knowledge(client: Any, name: str, *, create: bool = True, models: dict[str, str] | None = None) -> Any:
    """The knowledge collection: the same dense index settings as a data collection, sparse vector unindexed."""
    from chromadb.api.types import Schema, StringInvertedIndexConfig

    from headwater.store import hnsw
    from headwater.settings import HnswConfig

    if not create:
        return client.get_collection(name, embedding_function=None)
    schema = (Schema().create_index(config=hnsw.vector_index_config(HnswConfig()))
              .delete_index(config=StringInvertedIndexConfig(), key=SPARSE))
    return client.get_or_create_collection(name, schema=schema, metadata={KIND: KIND_KNOWLEDGE, **(models or {})},
                                           embedding_function=None)


LAST_PASS = "last_pass"  # the knowledge collection's metadata key: when the last pass ended and what it did
_PASS_SUMMARY = ("chunks", "candidate_pairs", "settled_in_stage1", "llm_pairs", "prompt_tokens", "completion_tokens",
                 "written", "removed")


def record_pass(collection: Any, report: dict[str, Any]) -> None:
    """Keep when this pass ended and its counts with the knowledge itself, in every mode."""
    import json
    import time

    summary = {"finished_at": time.time(), **{k: report.get(k, 0) for k in _PASS_SUMMARY}}
    collection.modify(metadata={**(collection.metadata or {}), LAST_PASS: json.dumps(summary)})


def last_pass(collection: Any) -> dict[str, Any] | None:
    """What record_pass kept of the last pass, or None before the first."""
    import json

    raw = (collection.metadata or {}).get(LAST_PASS)
    return json.loads(raw) if raw else None


def stored_metadata(collection: Any) -> dict[str, dict[str, Any]]:
    """Every knowledge record's metadata, by id (small: one record per group, not per chunk)."""
    out: dict[str, dict[str, Any]] = {}
    for ids, metadatas in _pages(collection):
        out.update(zip(ids, metadatas))
    return out


def _pages(collection: Any) -> Iterator[tuple[list[str], list[dict[str, Any]]]]:
    offset = 0
    while True:
        got = collection.get(include=["metadatas"], limit=PAGE, offset=offset)
        if not got["ids"]:
            return
        yield got["ids"], [m or {} for m in got["metadatas"]]
        offset += len(got["ids"])


def write(collection: Any, records: Sequence[KnowledgeRecord], batch: int) -> None:
    for start in range(0, len(records), batch):
        part = records[start:start + batch]
        collection.upsert(ids=[r.id for r in part], documents=[r.text for r in part],
                          embeddings=[r.embedding for r in part], metadatas=[r.metadata for r in part])


def delete(collection: Any, ids: Sequence[str], batch: int) -> None:
    ids = list(ids)
    for start in range(0, len(ids), batch):
        collection.delete(ids=ids[start:start + batch])


def point(source: Any, pointers: dict[str, list[str] | None], batch: int) -> int:
    """Set (or, with None, remove) each source chunk's `knowledge_ids`; chunks gone meanwhile are skipped."""
    ids = sorted(pointers)
    written = 0
    for start in range(0, len(ids), batch):
        part = ids[start:start + batch]
        present = set(source.get(ids=part, include=[])["ids"])  # a chunk deleted since the read stays deleted
        part = [i for i in part if i in present]
        if part:
            source.update(ids=part, metadatas=[{KNOWLEDGE_IDS: pointers[i]} for i in part])
            written += len(part)
    return written

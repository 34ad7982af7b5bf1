"""The per-document manifest: one small record per document, so a pass reads what changed in O(documents).

Deciding whether a document changed needs its version, content hash, chunk ids and whether its
chunks are all there; reading that from the chunks themselves costs every chunk's metadata
(sparse vector included). The manifest keeps it in a small collection next to the data,
`<collection>__manifest`, which works on every Chroma target and travels with the collection.

Correct after crashes, because an entry is trusted only when it says `complete`:
- before a batch writes any chunk of a document, its entry is marked incomplete;
- after the chunks are written, the entry is written complete (or removed, for a removed document);
- an incomplete or missing entry sends that one document back to reading its chunks.
A crash anywhere in between leaves an incomplete entry, never a complete one that lies.

Whether a *missing* entry means "nothing stored" depends on the source being covered: a source
is covered once every document it has in the collection has an entry (a coverage record says so).
A collection written before the manifest existed is not covered: its first full pass reads the
chunks as before and writes the entries and the coverage record, with no manual step.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

SUFFIX = "__manifest"
# Manifest record metadata: two keys, because reading a record costs per key. The source is its own
# key (a pass filters on it); everything else is one JSON string that is never filtered on.
SOURCE_ID = "source_id"
ENTRY = "entry"
COVERS = "covers"  # the coverage record's one key: the source it covers (not matched by SOURCE_ID)

PAGE = 5_000
IDS_LIMIT = 32_000  # Chroma's limit on ids in one get()


@dataclass
class ManifestEntry:
    """What the collection holds for one document, as its last complete write left it."""

    source_id: str
    uri: str
    doc_version: str | None = None
    doc_hash: str | None = None
    ids: list[str] = field(default_factory=list)  # the document's chunk ids, in order
    chunker: str | None = None
    complete: bool = True

    def metadata(self) -> dict[str, Any]:
        return {SOURCE_ID: self.source_id, ENTRY: json.dumps(self.to_json(), separators=(",", ":"))}

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any]) -> ManifestEntry:
        return cls(**json.loads(metadata[ENTRY]))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def entry_id(source_id: str, uri: str) -> str:
    return hashlib.sha256(f"{source_id}\x00{uri}".encode("utf-8")).hexdigest()[:32]


def coverage_id(source_id: str) -> str:
    return "coverage:" + hashlib.sha256(source_id.encode("utf-8")).hexdigest()[:32]


def _placeholder_vector(record_id: str) -> list[float]:
    # Chroma wants a vector per record; the manifest is never searched by it. Spread, not identical,
    # so the vector index never sees thousands of equal points.
    return [int(record_id[-8:], 16) / 0xFFFFFFFF, 1.0]


class Manifest:
    """The manifest collection of one data collection, with writes split to the store's batch limit."""

    def __init__(self, client: Any, collection: str, batch_limit: int, *, create: bool = True,
                 cloud: bool = False) -> None:
        self.batch_limit = batch_limit
        self.collection = self._open(client, collection + SUFFIX, create, cloud)
        self._covered: set[str] = set()  # coverage is never withdrawn: asked once per source and process

    @staticmethod
    def _open(client: Any, name: str, create: bool, cloud: bool) -> Any:
        from chromadb.api.types import Schema, StringInvertedIndexConfig
        from chromadb.errors import NotFoundError

        if create:
            # The chunk-id list is read, never filtered on; indexing it would only slow writes.
            schema = None if cloud else Schema().delete_index(config=StringInvertedIndexConfig(), key=ENTRY)
            return client.get_or_create_collection(name, schema=schema, embedding_function=None)
        try:
            return client.get_collection(name, embedding_function=None)
        except (NotFoundError, ValueError):
            return None  # a collection written before the manifest: every read falls back to chunks

    # Reads -----------------------------------------------------------------------------------

    def covers(self, source_id: str) -> bool:
        """Whether every document of the source that has chunks has an entry."""
        if self.collection is None:
            return False
        if source_id not in self._covered and self.collection.get(ids=[coverage_id(source_id)], include=[])["ids"]:
            self._covered.add(source_id)
        return source_id in self._covered

    def entries(self, source_id: str, uris: Sequence[str] | None = None) -> Iterator[ManifestEntry]:
        """Entries of a source (all, or these uris), a page at a time."""
        if self.collection is None:
            return
        if uris is None:
            for metadatas in self._pages({SOURCE_ID: source_id}):
                yield from map(ManifestEntry.from_metadata, metadatas)
            return
        wanted = sorted({entry_id(source_id, uri) for uri in uris})
        for start in range(0, len(wanted), IDS_LIMIT):
            got = self.collection.get(ids=wanted[start:start + IDS_LIMIT], include=["metadatas"])
            yield from map(ManifestEntry.from_metadata, got["metadatas"])

    def summary(self) -> dict[str, dict[str, int]] | None:
        """Documents and chunks per source from the entries alone; None while any entry is distrusted."""
        if self.collection is None:
            return None
        counts: dict[str, dict[str, int]] = {}
        for metadatas in self._pages(None):
            for metadata in metadatas:
                if ENTRY not in metadata:
                    continue  # a coverage record
                entry = ManifestEntry.from_metadata(metadata)
                if not entry.complete:
                    return None  # a write cut short: its chunk ids may not be what the collection holds
                source = counts.setdefault(entry.source_id, {"documents": 0, "chunks": 0})
                source["documents"] += 1
                source["chunks"] += len(entry.ids)
        return {source: counts[source] for source in sorted(counts)}

    def _pages(self, where: dict[str, Any] | None) -> Iterator[list[dict[str, Any]]]:
        offset = 0
        while True:
            batch = self.collection.get(where=where, include=["metadatas"], limit=PAGE, offset=offset)
            if not batch["ids"]:
                return
            yield batch["metadatas"]
            offset += len(batch["ids"])

    # Writes ----------------------------------------------------------------------------------

    def mark_incomplete(self, documents: Sequence[tuple[str, str]]) -> None:
        """Before a batch touches these documents' chunks: their entries may no longer be trusted."""
        self._upsert([ManifestEntry(s, u, complete=False) for s, u in documents])

    def write(self, entries: Sequence[ManifestEntry]) -> None:
        """After the chunks are written: what the collection now holds for these documents."""
        self._upsert(entries)

    def remove(self, documents: Sequence[tuple[str, str]]) -> None:
        """After a document's chunks are deleted: nothing is stored for it."""
        ids = [entry_id(s, u) for s, u in documents]
        for start in range(0, len(ids), self.batch_limit):
            self.collection.delete(ids=ids[start:start + self.batch_limit])

    def mark_covered(self, source_id: str) -> None:
        record = coverage_id(source_id)
        self.collection.upsert(ids=[record], embeddings=[_placeholder_vector(entry_id(source_id, ""))],
                               metadatas=[{COVERS: source_id}])
        self._covered.add(source_id)

    def _upsert(self, entries: Sequence[ManifestEntry]) -> None:
        for start in range(0, len(entries), self.batch_limit):
            part = entries[start:start + self.batch_limit]
            ids = [entry_id(e.source_id, e.uri) for e in part]
            self.collection.upsert(ids=ids, embeddings=[_placeholder_vector(i) for i in ids],
                                   metadatas=[e.metadata() for e in part])

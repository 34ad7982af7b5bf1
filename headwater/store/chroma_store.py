"""The Chroma side: client factory, the collection with its schema, and batched, bounded writes.

Chroma is the record of what is indexed. Each chunk's metadata carries its source, uri, document
version and content hash, so every "has this changed?" decision is read back from the collection.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import headwater.offline  # noqa: F401
from headwater.errors import ConfigurationError
from headwater.store.manifest import Manifest, ManifestEntry
from headwater.store.model_match import same_model
from headwater.settings import HARD_BATCH_CAP, HnswConfig, Settings

# Metadata keys every chunk record carries.
SOURCE_ID = "source_id"
URI = "uri"
URI_DIRS = "uri_dirs"  # every directory above the uri ("a", "a/b"): lets Chroma filter by uri prefix
DOC_VERSION = "doc_version"  # the connector's fingerprint (mtime and size for files)
DOC_HASH = "doc_hash"  # sha256 of the document's bytes
CONTENT_HASH = "content_hash"  # hash of this chunk's text
CHUNK_INDEX = "chunk_index"
CHUNK_COUNT = "chunk_count"  # how many chunks the document had when written: detects partial writes
SPARSE = "sparse_vector"  # the SPLADE vector, encoded by headwater.store.sparse_codec
CHUNKER = "chunker"  # fingerprint of the chunking rules that cut the chunk (headwater.pipeline.chunk.chunker_fingerprint)
# Collection metadata: the models its vectors came from.
DENSE_MODEL_KEY = "headwater_dense_model"
SPARSE_MODEL_KEY = "headwater_sparse_model"

# Chroma's limits on one get(): ids per call and values in one $in filter.
GET_IDS_LIMIT = 32_000
IN_VALUES_LIMIT = 16_000
PAGE = 2_000
HASH_PAGE = 1_000  # records one content-hash lookup holds at a time

# Called after each write with the operation ("upsert", "update", "delete"), ids, metadatas and
# the dense vectors written (upserts only; None otherwise).
WriteObserver = Callable[[str, Sequence[str], Sequence[dict[str, Any]] | None, Sequence[Any] | None], None]


def location_metadata(metadata: dict[str, Any], uri: str) -> dict[str, Any]:
    """A copy of `metadata` placed at `uri`: the uri and its directory prefixes."""
    parts = uri.split("/")[:-1]
    placed = {**metadata, URI: uri, URI_DIRS: ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]}
    if not placed[URI_DIRS]:  # Chroma rejects empty lists; None removes a key an earlier location had
        placed[URI_DIRS] = None
    return placed


def metadata_pages(collection: Any, where: dict[str, Any] | None = None,
                   page: int = PAGE) -> Iterator[tuple[list[str], list[dict[str, Any]]]]:
    """(ids, metadatas) of every record matching `where`, a page at a time (large collections)."""
    offset = 0
    while True:
        batch = collection.get(where=where, include=["metadatas"], limit=page, offset=offset)
        if not batch["ids"]:
            return
        yield batch["ids"], batch["metadatas"]
        offset += len(batch["ids"])


def record_pages(collection: Any, page: int = PAGE) -> Iterator[tuple[list[str], list[dict[str, Any]], Any]]:
    """(ids, metadatas, embeddings) of every record, a page at a time."""
    offset = 0
    while True:
        batch = collection.get(include=["metadatas", "embeddings"], limit=page, offset=offset)
        if not len(batch["ids"]):
            return
        yield batch["ids"], batch["metadatas"], batch["embeddings"]
        offset += len(batch["ids"])


def write_batch_limit(configured: int, client_max: int, cloud: bool) -> int:
    """The largest write Headwater sends: configured, the client's maximum, 4,999, and Cloud's 300 cap."""
    from headwater.store.cloud import CLOUD_WRITE_CAP

    return min(configured, client_max, HARD_BATCH_CAP, CLOUD_WRITE_CAP if cloud else HARD_BATCH_CAP)


def missing_embedded_store(path: Path | str) -> ConfigurationError:
    return ConfigurationError(f"there is no embedded Chroma at {path}; check --chroma-path "
                              "(or HEADWATER_CHROMA_PATH), or run `headwater sync` first")


def missing_collection(name: str) -> ConfigurationError:
    return ConfigurationError(f"there is no collection {name!r} at this Chroma target yet; run `headwater sync` "
                              "first or pass --collection")


def make_client(settings: Settings, *, fleet: bool = False) -> Any:
    """A Chroma client for the configured target: a server when chroma_host is set, else embedded."""
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    chroma_settings = ChromaSettings(anonymized_telemetry=False)
    if settings.chroma_cloud_api_key is not None:
        return chromadb.CloudClient(tenant=settings.chroma_cloud_tenant, database=settings.chroma_cloud_database,
                                    api_key=settings.chroma_cloud_api_key.get_secret_value(), settings=chroma_settings)
    if settings.chroma_host:
        headers = {}
        if settings.chroma_token is not None:
            headers["Authorization"] = f"Bearer {settings.chroma_token.get_secret_value()}"
        return chromadb.HttpClient(host=settings.chroma_host, port=settings.chroma_port,
                                   headers=headers, settings=chroma_settings)
    if fleet:
        raise ConfigurationError(
            "fleet mode needs a Chroma server: set HEADWATER_CHROMA_HOST (several workers writing one "
            "embedded Chroma directory corrupt its index)")
    return chromadb.PersistentClient(path=str(settings.chroma_path), settings=chroma_settings)


@dataclass
class StoredDocument:
    """What the collection holds for one document: read from its chunks, or from its manifest entry.

    Read from the manifest, `metadatas` is None (the chunks were not read): enough to decide whether
    the document changed, to touch or delete it; planning a new version reads its chunks.
    """

    uri: str
    ids: list[str] = field(default_factory=list)
    metadatas: list[dict[str, Any]] | None = field(default_factory=list)
    # The fingerprint today's chunker writes; None when the reader does not check it.
    chunker: str | None = None
    entry: ManifestEntry | None = None

    @classmethod
    def from_entry(cls, entry: ManifestEntry, chunker: str | None) -> StoredDocument:
        return cls(uri=entry.uri, ids=list(entry.ids), metadatas=None, chunker=chunker, entry=entry)

    @property
    def doc_hash(self) -> str | None:
        if self.metadatas is None:
            return self.entry.doc_hash  # type: ignore[union-attr]
        hashes = {m.get(DOC_HASH) for m in self.metadatas}
        return hashes.pop() if len(hashes) == 1 else None

    @property
    def doc_version(self) -> str | None:
        if self.metadatas is None:
            return self.entry.doc_version  # type: ignore[union-attr]
        versions = {m.get(DOC_VERSION) for m in self.metadatas}
        return versions.pop() if len(versions) == 1 else None

    @property
    def complete(self) -> bool:
        """One version throughout, every chunk present, and cut by today's chunker.

        A write that was cut short is not complete; neither is a document chunked with other rules
        or sizes, so every "unchanged?" check sends it through parsing and chunking again.
        """
        if self.metadatas is None:  # only complete entries are read as documents (ChromaStore.documents)
            return self.current_chunker
        counts = {m.get(CHUNK_COUNT) for m in self.metadatas}
        return (self.doc_hash is not None and self.doc_version is not None and len(counts) == 1
                and counts.pop() == len(self.ids) and self.current_chunker)

    @property
    def current_chunker(self) -> bool:
        if self.metadatas is None:
            return self.chunker is None or self.entry.chunker == self.chunker  # type: ignore[union-attr]
        return self.chunker is None or all(m.get(CHUNKER) == self.chunker for m in self.metadatas)

    def by_id(self) -> dict[str, dict[str, Any]]:
        assert self.metadatas is not None, "a manifest-read document has no chunk metadata; read its chunks"
        return dict(zip(self.ids, self.metadatas))

    def manifest_entry(self, source_id: str) -> ManifestEntry:
        """The entry this document's chunks (or its entry) amount to: a copy to change and write."""
        if self.metadatas is None:
            return replace(self.entry, ids=list(self.ids))  # type: ignore[type-var]
        order = sorted(range(len(self.ids)), key=lambda n: (self.metadatas or [{}])[n].get(CHUNK_INDEX) or 0)
        chunkers = {m.get(CHUNKER) for m in self.metadatas or ()}
        return ManifestEntry(source_id=source_id, uri=self.uri, doc_version=self.doc_version,
                             doc_hash=self.doc_hash, ids=[self.ids[n] for n in order],
                             chunker=chunkers.pop() if len(chunkers) == 1 else None,
                             complete=StoredDocument(self.uri, self.ids, self.metadatas).complete)



class ChromaStore:
    """One collection, with every write split into batches no larger than the batch limit."""

    def __init__(self, client: Any, collection: str, *, batch_size: int = HARD_BATCH_CAP,
                 dense_model: str = "", sparse_model: str = "", observers: Sequence[WriteObserver] = (),
                 create: bool = True, cloud: bool = False, chunker: str | None = None,
                 single_writer: bool = False, hnsw: HnswConfig | None = None) -> None:
        self.client = client
        self.hnsw = hnsw or HnswConfig()  # the dense index of a collection this store creates
        self.cloud = cloud
        # An embedded directory is written by one process (headwater.store.path_lock): what it reads
        # cannot change under it, so it may write manifest entries from what it read.
        self.single_writer = single_writer
        self.chunker = chunker  # stored documents cut by another chunker read as incomplete
        self.batch_limit = write_batch_limit(batch_size, client.get_max_batch_size(), cloud)
        self.observers = list(observers)
        # Chunks per source, as the last full read of its documents (documents(source_id)) found
        # them; forgotten at the next write. Lets the sparse index check itself without counting
        # the whole collection (headwater.retrieval.sparse_index_files).
        self.source_chunks: dict[str, int] = {}
        self.collection = self._open(collection, dense_model, sparse_model, create)
        self.manifest = Manifest(client, collection, self.batch_limit, create=create, cloud=cloud)

    def _open(self, name: str, dense_model: str, sparse_model: str, create: bool) -> Any:
        from chromadb.api.types import Schema, StringInvertedIndexConfig
        from chromadb.errors import NotFoundError

        from headwater.store import hnsw

        if not create:
            try:
                return self.client.get_collection(name, embedding_function=None)
            except (NotFoundError, ValueError):
                raise missing_collection(name) from None

        if self.cloud:
            from headwater.store.cloud import cloud_schema

            schema = cloud_schema()
        else:
            # The sparse vector is never filtered on; indexing its long string would only slow writes.
            schema = (Schema()
                      .create_index(config=hnsw.vector_index_config(self.hnsw))
                      .delete_index(config=StringInvertedIndexConfig(), key=SPARSE))
        models = {DENSE_MODEL_KEY: dense_model, SPARSE_MODEL_KEY: sparse_model}
        collection = self.client.get_or_create_collection(
            name, schema=schema, metadata={k: v for k, v in models.items() if v} or None,
            embedding_function=None)
        existing = collection.metadata or {}
        for key, wanted in models.items():
            if wanted and existing.get(key) and not same_model(existing[key], wanted):
                raise ConfigurationError(
                    f"collection {name!r} holds vectors from {existing[key]}, not {wanted}; mixing "
                    "models makes search meaningless: use another collection or the original model"
                    + (" (HEADWATER_DENSE_INT8=false runs MiniLM in float32, as releases before the int8 "
                       "build did)" if key == DENSE_MODEL_KEY and "+int8@" in wanted else ""))
        # Recorded once with its digest; an endpoint's fingerprint read again on other hardware is not rewritten.
        upgraded = {k: v for k, v in models.items() if v and "@" not in (existing.get(k) or "")}
        if upgraded and not self.cloud:  # record the digest on collections written before there was one
            collection.modify(metadata={**existing, **upgraded})
        if not self.cloud:  # Chroma Cloud chooses its own index (SPANN)
            hnsw.apply(collection, self.hnsw)
        return collection

    # Reads -----------------------------------------------------------------------------------

    def documents(self, source_id: str, uris: Sequence[str] | None = None, *,
                  backfill: bool = False) -> dict[str, StoredDocument]:
        """Stored documents of a source (all of them, or just these uris), by uri.

        Read from the manifest where it holds a complete entry (O(documents) small records), else
        from the document's chunks. On a source the manifest does not cover yet, all documents are
        read from their chunks, and `backfill` (a full pass) writes their entries so the next pass
        need not.
        """
        covered = self.manifest.covers(source_id)
        if uris is None and not covered:
            docs = self.document_chunks(source_id)
            if backfill:
                self._backfill(source_id, docs)
            self.source_chunks[source_id] = sum(len(doc.ids) for doc in docs.values())
            return docs
        docs: dict[str, StoredDocument] = {}
        cut_short: set[str] = set()  # an entry a write cut short: its chunks say what is there
        for entry in self.manifest.entries(source_id, uris):
            if entry.complete:
                docs[entry.uri] = StoredDocument.from_entry(entry, self.chunker)
            else:
                cut_short.add(entry.uri)
        unsure = set(cut_short)
        if uris is not None and not covered:  # chunks written before the manifest existed have no entry
            unsure.update(uri for uri in uris if uri not in docs)
        if unsure:
            from_chunks = self.document_chunks(source_id, sorted(unsure))
            docs.update(from_chunks)
            # An incomplete entry whose chunks are all gone still names a document the pass must forget.
            docs.update({uri: StoredDocument(uri, chunker=self.chunker) for uri in cut_short if uri not in from_chunks})
        if uris is None:  # complete entries name their chunks exactly; the others were read from the chunks
            self.source_chunks[source_id] = sum(len(doc.ids) for doc in docs.values())
        return docs

    def _backfill(self, source_id: str, docs: dict[str, StoredDocument]) -> None:
        """Entries for documents written before the manifest existed, then the source counts as covered.

        Documents that already have an entry keep it: a concurrent writer's entry is newer than
        what these chunk reads saw.
        """
        has_entry = {entry.uri for entry in self.manifest.entries(source_id)}
        self.manifest.write([doc.manifest_entry(source_id) for uri, doc in docs.items() if uri not in has_entry])
        self.manifest.mark_covered(source_id)

    def document_chunks(self, source_id: str, uris: Sequence[str] | None = None) -> dict[str, StoredDocument]:
        """Stored documents of a source (all of them, or just these uris) read from their chunks' metadata."""
        docs: dict[str, StoredDocument] = {}
        if uris is None:
            filters: Iterable[dict[str, Any]] = [{SOURCE_ID: source_id}]
        else:
            unique = sorted(set(uris))
            filters = [{"$and": [{SOURCE_ID: source_id}, {URI: {"$in": unique[i:i + IN_VALUES_LIMIT]}}]}
                       for i in range(0, len(unique), IN_VALUES_LIMIT)]
        for where in filters:
            for ids, metadatas in metadata_pages(self.collection, where):
                for record_id, metadata in zip(ids, metadatas):
                    doc = docs.setdefault(metadata[URI], StoredDocument(uri=metadata[URI], chunker=self.chunker))
                    doc.ids.append(record_id)
                    doc.metadatas.append(metadata)  # type: ignore[union-attr]
        return docs

    def chunks_of(self, docs: Sequence[StoredDocument]) -> dict[str, StoredDocument]:
        """These manifest-read documents read again from their chunks, fetched by id (no metadata filter)."""
        wanted = [record_id for doc in docs for record_id in doc.ids]
        found: dict[str, StoredDocument] = {}
        for start in range(0, len(wanted), GET_IDS_LIMIT):
            got = self.collection.get(ids=wanted[start:start + GET_IDS_LIMIT], include=["metadatas"])
            for record_id, metadata in zip(got["ids"], got["metadatas"]):
                doc = found.setdefault(metadata[URI], StoredDocument(uri=metadata[URI], chunker=self.chunker))
                doc.ids.append(record_id)
                doc.metadatas.append(metadata)  # type: ignore[union-attr]
        return found

    def vectors_by_content_hash(self, hashes: Sequence[str]) -> dict[str, tuple[list[float], str]]:
        """Dense vector and encoded sparse vector of any stored chunk with each content hash.

        Memory is bounded by HASH_PAGE records per call however many copies of a text the collection
        holds (a licence header in every file): each call asks only for hashes not yet found, so it
        finds at least one new hash or ends the search.
        """
        found: dict[str, tuple[list[float], str]] = {}
        unique = sorted(set(hashes))
        for start in range(0, len(unique), IN_VALUES_LIMIT):
            remaining = set(unique[start:start + IN_VALUES_LIMIT])
            while remaining:
                result = self.collection.get(where={CONTENT_HASH: {"$in": sorted(remaining)}},
                                             include=["embeddings", "metadatas"], limit=HASH_PAGE)
                if not result["ids"]:
                    break
                new = 0
                for embedding, metadata in zip(result["embeddings"], result["metadatas"]):
                    h = metadata[CONTENT_HASH]
                    if h in remaining and SPARSE in metadata:
                        found[h] = (list(embedding), metadata[SPARSE])
                        remaining.discard(h)
                        new += 1
                if not new or len(result["ids"]) < HASH_PAGE:
                    break  # every copy of the rest was seen (or none carries a sparse vector)
        return found

    def records(self, ids: Sequence[str]) -> dict[str, tuple[str, list[float], dict[str, Any]]]:
        """Text, embedding and metadata of these ids."""
        out = {}
        for start in range(0, len(ids), GET_IDS_LIMIT):
            result = self.collection.get(ids=list(ids[start:start + GET_IDS_LIMIT]),
                                         include=["documents", "embeddings", "metadatas"])
            for record_id, text, embedding, metadata in zip(
                    result["ids"], result["documents"], result["embeddings"], result["metadatas"]):
                out[record_id] = (text, list(embedding), metadata)
        return out

    def count(self) -> int:
        return self.collection.count()

    def source_summary(self) -> dict[str, dict[str, int]]:
        """Documents and chunks per source: from the manifest (one record per document) when it accounts
        for every chunk, else from every chunk's metadata (a collection written before the manifest,
        or a write cut short)."""
        summary = self.manifest.summary()
        if summary is not None and sum(s["chunks"] for s in summary.values()) == self.collection.count():
            return summary
        uris: dict[str, set[str]] = {}
        chunks: dict[str, int] = {}
        for _, metadatas in metadata_pages(self.collection):
            for metadata in metadatas:
                source = metadata.get(SOURCE_ID, "?")
                uris.setdefault(source, set()).add(metadata.get(URI, ""))
                chunks[source] = chunks.get(source, 0) + 1
        return {source: {"documents": len(uris[source]), "chunks": chunks[source]} for source in sorted(uris)}

    # Writes, each split to the batch limit ---------------------------------------------------------

    def upsert(self, ids: list[str], texts: list[str], embeddings: list[list[float]],
               metadatas: list[dict[str, Any]]) -> None:
        if self.cloud:
            from headwater.store.cloud import with_native_sparse

            stored = [with_native_sparse(m) if SPARSE in m else m for m in metadatas]
        else:
            stored = list(metadatas)
        for start, end in self._batches(len(ids)):
            self.collection.upsert(ids=ids[start:end], documents=texts[start:end],
                                   embeddings=embeddings[start:end], metadatas=stored[start:end])
            self._observe("upsert", ids[start:end], metadatas[start:end], embeddings[start:end])

    def update_metadata(self, ids: list[str], metadatas: list[dict[str, Any]]) -> None:
        for start, end in self._batches(len(ids)):
            self.collection.update(ids=ids[start:end], metadatas=metadatas[start:end])
            self._observe("update", ids[start:end], metadatas[start:end])

    def delete(self, ids: list[str]) -> None:
        for start, end in self._batches(len(ids)):
            self.collection.delete(ids=ids[start:end])
            self._observe("delete", ids[start:end], None)

    def _batches(self, total: int) -> Iterator[tuple[int, int]]:
        for start in range(0, total, self.batch_limit):
            yield start, min(start + self.batch_limit, total)

    def _observe(self, operation: str, ids: Sequence[str], metadatas: Sequence[dict[str, Any]] | None,
                 embeddings: Sequence[Any] | None = None) -> None:
        if operation != "update":  # a metadata update adds or removes no chunk
            self.source_chunks.clear()
        for observer in self.observers:
            observer(operation, ids, metadatas, embeddings)

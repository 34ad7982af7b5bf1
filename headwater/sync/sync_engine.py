"""The embedded pipeline: the same stage functions the fleet runs, in one process against one store.

A pass takes a set of changes, reads back what the collection holds for those documents, and
does the least work that makes the collection match the source: unchanged documents are
skipped by version (or by content hash when only the timestamp moved), renamed documents are
moved without touching the models, and within a changed document only chunks whose text is new
are embedded, and only if no identical chunk is already stored.
"""

from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from connectors.base import Discoverer, Lister, Reader
from headwater.store import chroma_store as keys
from headwater.store.chroma_store import ChromaStore, StoredDocument
from headwater.errors import DocumentUnchanged, DocumentVanished, PermanentDocumentError, RetryableError, SkippedDocument
from headwater.pipeline import decisions, discovery, outcomes
from headwater.pipeline.deletion_guard import check_deletions, likely_deletions
from headwater.pipeline.document_plan import DocumentFacts, DocumentPlan, plan_document, unchanged_by_version
from headwater.pipeline.skipped_versions import NoSkippedVersions, SkippedVersions
from headwater.lazy import Lazy
from headwater.pipeline.outcomes import write_outcome
from headwater.models import Chunk, ChunkRecord, DocumentChange, Op
from headwater.pipeline.report import SyncReport
from headwater.settings import Settings
from headwater.store.sparse_codec import encode_sparse
from headwater.retrieval.sparse_index import SparseIndex
from headwater.pipeline.chunk import chunk_document
from headwater.pipeline.embed_dense import DenseEmbedder
from headwater.pipeline.embed_lanes import embed_in_lanes, lane_count
from headwater.pipeline.embed_sparse import SpladeEncoder
from headwater.pipeline.fetch import FetchedDocument, fetch_document
from headwater.pipeline.parse import ParsedDocument, parse_document
from headwater.pipeline.write import BatchWriter
from headwater.sync.crawl_pass import CrawlPass

log = logging.getLogger(__name__)

# Chunks gathered from several documents before the models run: enough for well-filled,
# length-sorted batches, small enough that parsing of the next documents overlaps embedding.
WINDOW_CHUNKS = 256
MIN_WINDOW_CHUNKS = 64
_QUEUE_DEPTH = 32


class Progress(Protocol):
    def start(self, total_documents: int) -> None: ...
    def document_done(self, uri: str) -> None: ...
    def embedded(self, count: int) -> None: ...


class _NoProgress:
    def start(self, total_documents: int) -> None: ...
    def document_done(self, uri: str) -> None: ...
    def embedded(self, count: int) -> None: ...


@dataclass
class _Item:
    """One document's outcome from the reading side, handed to the writing side."""

    change: DocumentChange
    action: str  # index | touch | unchanged | skip | fail | fatal
    fetched: FetchedDocument | None = None
    parsed: ParsedDocument | None = None
    chunks: list[Chunk] | None = None
    moved_from: str | None = None  # a rename: the uri the same bytes were stored under
    reason: str = ""
    error: BaseException | None = None


class SyncEngine:
    """Runs sync passes for any connector that can list and read, writing through one ChromaStore."""

    def __init__(self, store: ChromaStore, dense: DenseEmbedder, sparse: SpladeEncoder, settings: Settings,
                 progress: Progress | None = None, sparse_index: SparseIndex | Lazy | None = None,
                 skipped: SkippedVersions | None = None) -> None:
        self.store = store
        self.dense = dense
        self.sparse = sparse
        self.settings = settings
        self.progress = progress or _NoProgress()
        self.lanes = lane_count(settings.model_threads)
        # Kept current by the store's write observers; saved once per pass.
        self.sparse_index = sparse_index
        # Which version of each document a pass skipped: the next full pass need not read it again.
        self.skipped = skipped or NoSkippedVersions()
        # The one chunking entry point; replaceable so the benchmarks can compare the old chunker.
        self.chunker = chunk_document

    def sync(self, connector: Lister | Any, *, allow_mass_delete: bool = False) -> SyncReport:
        """A full pass: everything listed is brought up to date, everything no longer listed is removed.

        The listing is trusted only when it completed (a ListingError stops the pass before any
        write), and a pass that would empty or mostly empty the source is refused unless allowed.
        The listing is streamed against the manifest: an unchanged document costs its uri, and only
        changed documents are held.
        """
        source_id = connector.source_id
        # Not covered yet: this pass writes every entry (a backfill). Covered: entries a crash left
        # incomplete over complete chunks are written again, where no other writer can race us.
        repair = self.store.single_writer and self.store.manifest.covers(source_id)
        stored = self.store.documents(source_id, backfill=True)
        report = SyncReport(source_id=source_id)
        # A source that finds documents while fetching (a website) is crawled: its listing is what the
        # crawl reached, and what it did not reach is gone only as discovery.deletions says.
        crawl = CrawlPass(connector) if isinstance(connector, Discoverer) else None
        listing = crawl.changes() if crawl is not None else connector.list_documents()
        diff = decisions.diff_listing(listing, stored, self.skipped.versions(source_id))
        if crawl is not None:
            diff.gone = discovery.deletions(diff.gone, crawl.gone, crawl.complete)
        repaired = []
        for uri in diff.unchanged:
            report.unchanged += 1
            doc = stored.get(uri)
            if doc is None:  # a version skipped before
                continue
            report.chunks_unchanged += len(doc.ids)
            if repair and doc.entry is None:  # its entry was cut short
                repaired.append(doc.manifest_entry(source_id))
        gone = [DocumentChange(source_id, uri, Op.DELETE) for uri in diff.gone]
        deleting = likely_deletions(stored, diff.listed, diff.todo) if crawl is None else len(diff.gone)
        check_deletions(source_id, len(stored), deleting, len(diff.listed), allow_mass_delete)
        self.store.manifest.write(repaired)
        return self.apply(connector, [*diff.todo, *gone], stored, report)

    def apply(self, connector: Reader | Any, changes: Iterable[DocumentChange],
              stored: dict[str, StoredDocument] | None = None, report: SyncReport | None = None) -> SyncReport:
        """An incremental pass over these changes (the last change per uri wins)."""
        source_id = connector.source_id
        latest = {change.uri: change for change in changes}
        if stored is None:
            stored = self.store.documents(source_id, list(latest))
        report = report or SyncReport(source_id=source_id)

        deletes = {uri for uri, c in latest.items() if c.op is Op.DELETE and uri in stored}
        todo = []
        for change in latest.values():
            if change.op is not Op.UPSERT:
                continue
            doc = stored.get(change.uri)
            if unchanged_by_version(doc, change):
                report.unchanged += 1
                report.chunks_unchanged += len(doc.ids)
            else:
                todo.append(change)
        self.progress.start(len(todo) + len(deletes))
        # A lazily opened sparse index opens while the documents are read and embedded; every write
        # waits for it, since it must see them all.
        opening = None
        if (todo or deletes) and isinstance(self.sparse_index, Lazy):
            pool = ThreadPoolExecutor(1, thread_name_prefix="headwater-index")
            opening = pool.submit(self.sparse_index.materialize)
            pool.shutdown(wait=False)  # the one task still runs; its thread ends with it, not with the process
        writer = BatchWriter(self.store, before_write=opening.result if opening else None)
        prefetched = self._prefetch_chunks(todo, stored)

        # Documents about to disappear, by content: a new document with the same bytes is a rename.
        vanishing = {stored[uri].doc_hash: uri for uri in sorted(deletes) if stored[uri].complete}
        items: queue.Queue[_Item | None] = queue.Queue(maxsize=_QUEUE_DEPTH)
        stop = threading.Event()
        reader = threading.Thread(target=self._read_all, args=(connector, todo, stored, vanishing, items, stop),
                                  name="headwater-parse", daemon=True)
        reader.start()
        try:
            for window in self._windows(items):
                self._write_window(window, stored, writer, report, deletes, prefetched)
                prefetched = None  # the first window's; later windows read their own
        finally:
            stop.set()  # a failed write must not leave the reader blocked on a full queue
            reader.join()

        for uri in sorted(deletes):
            write_outcome(writer, outcomes.removed(source_id, uri, stored[uri], outcomes.DELETED))
            report.deleted += 1
            report.chunks_deleted += len(stored[uri].ids)
            self.progress.document_done(uri)
        writer.flush()
        self.skipped.save()
        if self.sparse_index is not None and (todo or deletes):
            self.sparse_index.persist()
        report.chunks_written = writer.written
        return report.finish()

    # Reading side (a thread, so parsing overlaps embedding) -------------------------------------

    def _read_all(self, connector: Any, todo: list[DocumentChange], stored: dict[str, StoredDocument],
                  vanishing: dict[str | None, str], items: queue.Queue, stop: threading.Event) -> None:
        def put(item: _Item | None) -> bool:
            while not stop.is_set():
                try:
                    items.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        change = None
        try:
            for change in todo:
                if not put(self._read_one(connector, change, stored, vanishing)):
                    return
        except BaseException as exc:  # noqa: BLE001  (handed to the writing side, which re-raises)
            put(_Item(change=change, action="fatal", error=exc))  # type: ignore[arg-type]
        finally:
            put(None)

    def _read_one(self, connector: Any, change: DocumentChange, stored: dict[str, StoredDocument],
                  vanishing: dict[str | None, str]) -> _Item:
        settings = self.settings
        doc = stored.get(change.uri)
        try:
            fetched = fetch_document(connector, change.uri, settings.max_document_bytes,
                                     known_version=decisions.known_version(doc))
        except DocumentUnchanged:  # the source said so without sending the bytes (an HTTP 304)
            return _Item(change, "unchanged")
        except (DocumentVanished, SkippedDocument) as exc:  # gone, or declined by its connector
            return _Item(change, "skip", reason=str(exc))
        except (PermanentDocumentError, RetryableError) as exc:
            return _Item(change, "fail", reason=str(exc))
        data = fetched.data
        # Only the hash and timestamp travel on: a large folder's bytes must not pile up in the queue.
        fetched = replace(fetched, data=b"")
        if decisions.is_touch(doc, fetched):
            return _Item(change, "touch", fetched=fetched)
        # Chunk texts start with the document's path, so a renamed document is chunked (and
        # embedded) again under its new path; its old records go in the same window.
        moved_from = decisions.rename_origin(change.uri, fetched.doc_hash, doc, vanishing)
        try:
            parsed = parse_document(change.uri, data, fetched.mime_type)
            chunks = self.chunker(parsed, change.uri, settings)
        except Exception as exc:  # noqa: BLE001  (one bad document must not stop the others)
            state, reason = decisions.parse_failure(exc)
            if not decisions.expected_parse_error(exc):
                log.exception("unexpected error parsing %s", change.uri)
            if state == outcomes.SKIPPED:
                return _Item(change, "skip", fetched=fetched, reason=reason)
            return _Item(change, "fail", reason=reason)
        return _Item(change, "index", fetched=fetched, parsed=parsed, chunks=chunks, moved_from=moved_from)

    def _windows(self, items: queue.Queue) -> Iterable[list[_Item]]:
        window: list[_Item] = []
        size = 0
        while True:
            item = items.get()
            if item is None:
                break
            if item.action == "fatal":
                raise item.error  # type: ignore[misc]
            window.append(item)
            size += len(item.chunks or ())
            # Documents that need no model work still bound the window, so their writes are not held back.
            if size >= WINDOW_CHUNKS or len(window) >= WINDOW_CHUNKS or (size >= MIN_WINDOW_CHUNKS and items.empty()):
                yield window
                window, size = [], 0
        if window:
            yield window

    # Writing side ----------------------------------------------------------------------------

    def _write_window(self, window: list[_Item], stored: dict[str, StoredDocument], writer: BatchWriter,
                      report: SyncReport, deletes: set[str], prefetched: Any = None) -> None:
        planned: list[tuple[_Item, DocumentPlan]] = []
        self._read_chunks(window, stored, prefetched.result() if prefetched else None)
        for item in window:
            uri = item.change.uri
            doc = stored.get(uri)
            if item.action == "fail":
                report.fail(uri, item.reason)  # whatever was indexed before stays
            elif item.action == "unchanged":
                report.unchanged += 1
                report.chunks_unchanged += len(doc.ids) if doc else 0
            elif item.action == "skip":
                report.skip(uri, item.reason)
                if item.fetched is not None:  # read, then declined by the parser: not read again at this version
                    self.skipped.record(item.change.source_id, uri, self._version(item))
                # Now empty, unsupported or gone: its old chunks would mislead.
                write_outcome(writer, outcomes.removed(item.change.source_id, uri, doc, outcomes.SKIPPED, item.reason))
                report.chunks_deleted += len(doc.ids) if doc else 0
            elif item.action == "touch":
                write_outcome(writer, outcomes.touched(item.change.source_id, doc, self._version(item),  # type: ignore[arg-type]
                                                       _mtime(item)))
                report.unchanged += 1
                report.chunks_unchanged += len(doc.ids)  # type: ignore[union-attr]
            else:
                report.warn(uri, item.parsed.warnings)  # type: ignore[union-attr]
                planned.append(self._plan(item, doc, report))
        planned = self._refuse_unreadable(planned, report)
        if planned:
            self._attach_vectors([r for _, plan in planned for r in plan.records], report)
        for item, plan in planned:
            write_outcome(writer, outcomes.indexed(plan))
            report.chunks_deleted += len(plan.stale)
            kind = decisions.indexed_as(bool(stored.get(item.change.uri)),
                                        item.moved_from if item.moved_from in deletes else None)
            if kind.startswith(decisions.MOVED_FROM):
                deletes.discard(item.moved_from)
                origin = stored[item.moved_from]
                write_outcome(writer, outcomes.removed(item.change.source_id, item.moved_from, origin,
                                                       outcomes.DELETED))
                report.chunks_deleted += len(origin.ids)  # the records under the old path are gone
                report.moved += 1
            elif kind == decisions.UPDATED:
                report.updated += 1
            else:
                report.added += 1
        for item in window:
            self.progress.document_done(item.change.uri)

    def _prefetch_chunks(self, todo: list[DocumentChange], stored: dict[str, StoredDocument]) -> Any:
        """Start reading the chunks the first window will plan against, while its documents are parsed.

        The first read of a large collection in a process costs Chroma ~0.6 s of CPU (200,000
        chunks) whatever it reads; begun here it overlaps parsing instead of waiting for it. Bounded
        to one window's chunks, so a pass that changes everything holds no more than it did. Only
        where this process is the one writer: nothing can change those chunks before they are used.
        """
        if not self.store.single_writer:
            return None
        docs, size = {}, 0
        for change in todo:
            doc = stored.get(change.uri)
            if doc is None or doc.metadatas is not None:
                continue
            size += len(doc.ids)
            if size > WINDOW_CHUNKS:
                break
            docs[change.uri] = doc
        if not docs:
            return None
        pool = ThreadPoolExecutor(1, thread_name_prefix="headwater-chunks")
        reading = pool.submit(lambda: (set(docs), self.store.chunks_of(list(docs.values()))))
        pool.shutdown(wait=False)  # its thread ends with the one task
        return reading

    def _read_chunks(self, window: list[_Item], stored: dict[str, StoredDocument],
                     prefetched: tuple[set[str], dict[str, StoredDocument]] | None = None) -> None:
        """Documents about to be planned need their chunks' metadata, which the manifest does not hold."""
        uris = [item.change.uri for item in window if item.action == "index"
                and item.change.uri in stored and stored[item.change.uri].metadatas is None]
        if uris:
            read, found = prefetched or (set(), {})
            unread = [uri for uri in uris if uri not in read]
            if unread:
                # A complete entry names exactly its document's chunks: read them by id.
                found = {**found, **self.store.chunks_of([stored[uri] for uri in unread])}
            for uri in uris:  # chunks gone behind the manifest's back: plan it as new
                stored[uri] = found.get(uri) or StoredDocument(uri, chunker=self.store.chunker)

    def _plan(self, item: _Item, doc: StoredDocument | None, report: SyncReport) -> tuple[_Item, DocumentPlan]:
        """New records to embed, metadata updates for kept chunks, and stale ids, for one document."""
        facts = DocumentFacts(
            source_id=item.change.source_id, uri=item.change.uri, doc_version=self._version(item),
            doc_hash=item.fetched.doc_hash, modified_time=_mtime(item),  # type: ignore[union-attr]
            mime_type=item.parsed.mime_type, parser=item.parsed.parser, url=item.fetched.url,  # type: ignore[union-attr]
            metadata=item.fetched.metadata)  # type: ignore[union-attr]
        plan = plan_document(facts, item.chunks or [], doc)
        report.chunks_unchanged += plan.kept
        return item, plan

    def _refuse_unreadable(self, planned: list[tuple[_Item, DocumentPlan]],
                           report: SyncReport) -> list[tuple[_Item, DocumentPlan]]:
        """An embedding service refuses texts longer than it reads before they are sent: only their documents fail."""
        if not self.settings.dense_from_endpoint:
            return planned
        kept = []
        for item, plan in planned:
            reason = next(filter(None, (self.dense.too_long(r.text) for r in plan.records)), None)
            if reason:
                report.fail(item.change.uri, reason)  # whatever was indexed before stays
            else:
                kept.append((item, plan))
        return kept

    def _attach_vectors(self, records: list[ChunkRecord], report: SyncReport) -> None:
        """Fill in vectors: copied from identical stored chunks where possible, else computed once per text."""
        by_hash: dict[str, list[ChunkRecord]] = {}
        for record in records:
            by_hash.setdefault(record.metadata[keys.CONTENT_HASH], []).append(record)
        known = self.store.vectors_by_content_hash(list(by_hash))
        missing = [h for h in by_hash if h not in known]
        texts = [by_hash[h][0].text for h in missing]
        if texts:
            dense, sparse = embed_in_lanes(self.dense, self.sparse, texts, self.lanes)
            for h, vector, (indices, values) in zip(missing, dense, sparse):
                known[h] = (vector.tolist(), encode_sparse(indices, values))
            self.progress.embedded(len(texts))
        report.chunks_embedded += len(texts)
        computed = set(missing)
        for h, group in by_hash.items():
            embedding, sparse_vector = known[h]
            # Identical texts share one computation: all but the first copy count as reused.
            report.chunks_reused += len(group) - (1 if h in computed else 0)
            for record in group:
                record.embedding = embedding
                record.metadata[keys.SPARSE] = sparse_vector

    @staticmethod
    def _version(item: _Item) -> str:
        return decisions.document_version(item.fetched, item.change)  # type: ignore[arg-type]


def _mtime(item: _Item) -> float:
    return decisions.modified_time(item.fetched, item.change)  # type: ignore[arg-type]


"""The per-document manifest: trusted only when complete, backfilled on old collections, bounded lookups."""

from __future__ import annotations

import pytest

from headwater.store import chroma_store as keys
from headwater.pipeline import outcomes
from headwater.store.chroma_store import ChromaStore
from headwater.store.manifest import ManifestEntry
from headwater.models import ChunkRecord
from headwater.pipeline.write import BatchWriter


@pytest.fixture
def client(tmp_path):
    import chromadb

    return chromadb.PersistentClient(path=str(tmp_path / "chroma"))


def chunk(uri: str, n: int, count: int, version: str = "v1", text: str | None = None) -> ChunkRecord:
    text = text or f"{uri} chunk {n} {version}"
    metadata = {keys.SOURCE_ID: "src", keys.URI: uri, keys.DOC_VERSION: version, keys.DOC_HASH: f"h-{version}",
                keys.CONTENT_HASH: f"c-{text}", keys.CHUNK_INDEX: n, keys.CHUNK_COUNT: count,
                keys.CHUNKER: "k1", keys.SPARSE: "sparse"}
    return ChunkRecord(f"{uri}#{n}#{version}", text, metadata, [0.1, 0.2, float(n)])


def write_chunks(store: ChromaStore, records: list[ChunkRecord]) -> None:
    """Chunks written the way Headwater wrote them before the manifest existed."""
    store.upsert([r.id for r in records], [r.text for r in records], [r.embedding for r in records],
                 [r.metadata for r in records])


def entry(uri: str, version: str = "v1", count: int = 2) -> ManifestEntry:
    return ManifestEntry("src", uri, version, f"h-{version}", [f"{uri}#{n}#{version}" for n in range(count)], "k1")


def test_an_old_collection_is_read_from_its_chunks_once_then_from_the_manifest(client):
    store = ChromaStore(client, "old", chunker="k1")
    write_chunks(store, [chunk("a.md", n, 2) for n in range(2)] + [chunk("b.md", 0, 2)])  # b.md was cut short
    assert not store.manifest.covers("src")
    first = store.documents("src", backfill=True)
    assert first["a.md"].complete and not first["b.md"].complete and first["a.md"].metadatas is not None
    assert store.manifest.covers("src")

    again = store.documents("src")
    assert again["a.md"].metadatas is None, "read from the manifest, not the chunks"
    assert again["a.md"].complete and again["a.md"].ids == ["a.md#0#v1", "a.md#1#v1"]
    assert again["b.md"].metadatas is not None and not again["b.md"].complete  # an incomplete entry: chunks


def test_a_flush_marks_entries_incomplete_before_chunks_and_complete_after(client):
    store = ChromaStore(client, "crash", chunker="k1")
    store.documents("src", backfill=True)  # an empty source is covered at once
    writer = BatchWriter(store)
    seen = []
    writer.after_chunks = lambda: seen.append(list(store.manifest.entries("src")))
    records = [chunk("a.md", n, 2) for n in range(2)]
    outcomes.write_outcome(writer, outcomes.Outcome("a.md", outcomes.INDEXED, upserts=records, source_id="src",
                                                    entry=entry("a.md")))
    writer.flush()
    (during,) = seen
    assert [e.complete for e in during] == [False], "between chunk and manifest writes the entry is distrusted"
    assert store.documents("src")["a.md"].metadatas is None

    def die() -> None:
        raise SystemExit("killed between the chunk writes and the manifest write")

    writer.after_chunks = die
    v2 = [chunk("a.md", n, 2, "v2") for n in range(2)]
    outcomes.write_outcome(writer, outcomes.Outcome("a.md", outcomes.INDEXED, upserts=v2,
                                                    deletes=[r.id for r in records], source_id="src",
                                                    entry=entry("a.md", "v2")))
    with pytest.raises(SystemExit):
        writer.flush()
    doc = store.documents("src")["a.md"]
    assert doc.metadatas is not None, "the cut-short entry sends the document back to its chunks"
    assert doc.complete and doc.doc_version == "v2"


def test_a_covered_source_without_an_entry_holds_nothing_and_removal_forgets(client):
    store = ChromaStore(client, "gone", chunker="k1")
    store.documents("src", backfill=True)
    writer = BatchWriter(store)
    outcomes.write_outcome(writer, outcomes.Outcome("a.md", outcomes.INDEXED, upserts=[chunk("a.md", 0, 1)],
                                                    source_id="src", entry=entry("a.md", count=1)))
    writer.flush()
    assert set(store.documents("src", ["a.md", "never.md"])) == {"a.md"}
    outcomes.write_outcome(writer, outcomes.removed("src", "a.md", store.documents("src")["a.md"], outcomes.DELETED))
    writer.flush()
    assert store.documents("src") == {} and store.count() == 0
    assert list(store.manifest.entries("src")) == []


def test_a_chunker_change_makes_manifest_documents_incomplete(client):
    store = ChromaStore(client, "rules", chunker="k1")
    store.documents("src", backfill=True)
    store.manifest.write([entry("a.md")])
    assert store.documents("src")["a.md"].complete
    assert not ChromaStore(client, "rules", chunker="k2").documents("src")["a.md"].complete


def test_content_hash_lookups_hold_a_bounded_page(client, monkeypatch):
    store = ChromaStore(client, "hashes", chunker="k1")
    boilerplate = [chunk(f"doc{n}.md", 0, 2, text="Licensed under the Apache License") for n in range(30)]
    write_chunks(store, boilerplate + [chunk("x.md", 1, 2, text="rare")])
    monkeypatch.setattr(keys, "HASH_PAGE", 4)
    pages = []
    real_get = store.collection.get
    monkeypatch.setattr(store.collection, "get", lambda **kw: pages.append(kw.get("limit")) or real_get(**kw))
    found = store.vectors_by_content_hash(["c-Licensed under the Apache License", "c-rare", "c-missing"])
    assert set(found) == {"c-Licensed under the Apache License", "c-rare"}
    assert pages and all(limit == 4 for limit in pages)


def test_a_pass_checks_the_saved_sparse_index_against_the_documents_it_read(client, tmp_path, monkeypatch):
    from headwater.store.sparse_codec import encode_sparse
    from headwater.retrieval.sparse_index import SparseIndex
    from headwater.retrieval.sparse_index_files import open_sparse_index

    sparse = encode_sparse([1, 2], [1.0, 0.5])
    records = [chunk(f"d{d}.md", n, 2) for d in range(3) for n in range(2)]
    for r in records:
        r.metadata[keys.SPARSE] = sparse
    store = ChromaStore(client, "checked", batch_size=100, single_writer=True)
    index = SparseIndex(tmp_path / "idx")
    store.observers.append(index.written)
    write_chunks(store, records)
    store.documents("src", backfill=True)  # writes the manifest (a first pass)
    index.persist()

    def count_forbidden():
        raise AssertionError("the collection was counted")

    again = ChromaStore(client, "checked", batch_size=100, single_writer=True)  # the next pass, in a new process
    again.documents("src")
    monkeypatch.setattr(again, "count", count_forbidden)
    opened = open_sparse_index(again, tmp_path / "idx", save=True)
    assert len(opened) == 6 and opened.generation() == index.generation(), "loaded, not rebuilt"

    # A document the manifest names but the index never saw (written while the index was not kept):
    extra = chunk("d9.md", 0, 1)
    extra.metadata[keys.SPARSE] = sparse
    again.collection.upsert(ids=[extra.id], documents=[extra.text], embeddings=[extra.embedding],
                            metadatas=[extra.metadata])
    again.manifest.write([ManifestEntry("src", "d9.md", "v1", "h-v1", [extra.id], "k1")])
    again.documents("src")
    rebuilt = open_sparse_index(again, tmp_path / "idx", save=True)
    assert len(rebuilt) == 7 and extra.id in rebuilt.row_of

    # Without a full read of every source the index holds (or after a write), the count decides.
    third = ChromaStore(client, "checked", batch_size=100, single_writer=True)
    counted = []
    monkeypatch.setattr(third, "count", lambda: counted.append(1) or third.collection.count())
    assert len(open_sparse_index(third, tmp_path / "idx", save=True)) == 7 and counted == [1]
    third.documents("src")
    third.delete([extra.id])
    index_after = open_sparse_index(third, tmp_path / "idx", save=True)
    assert counted == [1, 1] and len(index_after) == 6


def test_the_source_summary_comes_from_the_manifest_once_it_accounts_for_every_chunk(client, monkeypatch):
    store = ChromaStore(client, "summary", chunker="k1")
    write_chunks(store, [chunk("a.md", n, 2) for n in range(2)] + [chunk("b.md", 0, 1)])
    want = {"src": {"documents": 2, "chunks": 3}}
    assert store.source_summary() == want  # no entries yet: counted from the chunks
    store.documents("src", backfill=True)  # a full pass writes the entries

    def every_chunk(*_, **__):
        raise AssertionError("read every chunk's metadata")

    with monkeypatch.context() as patched:
        patched.setattr("headwater.store.chroma_store.metadata_pages", every_chunk)
        assert store.source_summary() == want
    store.manifest.mark_incomplete([("src", "a.md")])  # a write cut short: the entries are not the truth
    assert store.manifest.summary() is None and store.source_summary() == want

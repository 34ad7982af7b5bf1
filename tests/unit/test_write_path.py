"""The one write path: outcomes to writes, batches without duplicate ids, removed metadata keys."""

from __future__ import annotations

import pytest

from headwater.store import chroma_store as keys
from headwater.pipeline import outcomes
from headwater.store.chroma_store import ChromaStore, StoredDocument
from headwater.pipeline.deletion_guard import MassDeleteRefused, check_deletions, likely_deletions
from headwater.pipeline.document_plan import DocumentFacts, plan_document
from headwater.models import Chunk, ChunkRecord, DocumentChange, Op
from headwater.pipeline.write import BatchWriter


@pytest.fixture
def store(tmp_path):
    import chromadb

    return ChromaStore(chromadb.PersistentClient(path=str(tmp_path / "chroma")), "writes", batch_size=3)


def record(record_id: str, text: str, **metadata) -> ChunkRecord:
    return ChunkRecord(record_id, text, {"uri": "a.md", **metadata}, [0.1, 0.2, 0.3])


def test_a_batch_never_sends_one_id_twice_and_the_last_write_wins(store):
    writer = BatchWriter(store)
    writer.upsert([record("x", "old", v=1), record("y", "keep", v=1)])
    writer.upsert([record("x", "new", v=2)])  # the same document from a newer run, in the same batch
    writer.delete(["y"])
    writer.upsert([record("y", "back", v=3)])  # a delete followed by an upsert of the same id
    writer.update("y", {"v": 4})
    writer.flush()
    got = store.collection.get(include=["documents", "metadatas"])
    assert dict(zip(got["ids"], got["documents"])) == {"x": "new", "y": "back"}
    assert {i: m["v"] for i, m in zip(got["ids"], got["metadatas"])} == {"x": 2, "y": 4}


def test_batches_stay_within_the_store_limit(store):
    sizes = []
    store.observers.append(lambda op, ids, *_: sizes.append(len(ids)))
    writer = BatchWriter(store)
    writer.upsert([record(f"r{n}", f"text {n}") for n in range(7)])
    writer.flush()
    assert max(sizes) <= 3 and sum(sizes) == 7


def test_a_kept_chunk_loses_the_metadata_keys_an_edit_removed(store):
    facts = DocumentFacts("src", "a.md", "v2", "h2", 2.0, "text/markdown", "unstructured")
    old_metadata = {keys.URI: "a.md", keys.SOURCE_ID: "src", "title": "Old title", "section": "Old section",
                    keys.CHUNK_INDEX: 0, keys.CHUNK_COUNT: 1, keys.DOC_VERSION: "v1"}
    chunk = Chunk(text="Unchanged paragraph.", index=0)  # no title or section any more
    from headwater.ids import chunk_ids

    (chunk_id,) = chunk_ids("src", "a.md", [chunk.text])
    store.upsert([chunk_id], [chunk.text], [[0.1, 0.2, 0.3]], [old_metadata])
    stored = StoredDocument("a.md", [chunk_id], [old_metadata])
    plan = plan_document(facts, [chunk], stored)
    assert plan.records == [] and plan.updates[chunk_id]["title"] is None
    writer = BatchWriter(store)
    outcomes.write_outcome(writer, outcomes.indexed(plan))
    writer.flush()
    (metadata,) = store.collection.get(ids=[chunk_id], include=["metadatas"])["metadatas"]
    assert "title" not in metadata and "section" not in metadata and metadata[keys.DOC_VERSION] == "v2"


def test_outcomes_say_which_writes_each_ending_needs():
    stored = StoredDocument("a.md", ["1", "2"], [{keys.DOC_VERSION: "v1", "modified_time": 1.0}] * 2)
    gone = outcomes.removed("src", "a.md", stored, outcomes.SKIPPED)
    assert gone.deletes == ["1", "2"] and gone.forget  # its manifest entry goes with its chunks
    assert not outcomes.removed("src", "a.md", None, outcomes.DELETED).writes
    assert not outcomes.failed("a.md", "corrupt").writes  # what was indexed before stays
    touched = outcomes.touched("src", stored, "v2", 2.0)
    assert touched.state == outcomes.UNCHANGED and set(touched.updates) == {"1", "2"}
    assert touched.entry.doc_version == "v2" and touched.entry.ids == ["1", "2"]
    assert not outcomes.touched("src", stored, "v1", 1.0).writes
    restored = outcomes.Outcome.from_json(touched.to_json())
    assert restored == touched


def test_mass_deletions_are_refused_unless_allowed():
    check_deletions("docs", stored=10, deleting=5, listed=5, allowed=False)  # half is fine
    with pytest.raises(MassDeleteRefused, match="more than half"):
        check_deletions("docs", stored=10, deleting=6, listed=4, allowed=False)
    with pytest.raises(MassDeleteRefused, match="lists no documents"):
        check_deletions("docs", stored=3, deleting=3, listed=0, allowed=False)
    check_deletions("docs", stored=3, deleting=3, listed=0, allowed=True)


def test_renamed_documents_do_not_count_as_deletions():
    stored = {f"{n}.md": StoredDocument(f"{n}.md", ["x"], [{keys.DOC_VERSION: f"v{n}"}]) for n in range(4)}
    listed = {f"moved/{n}.md": DocumentChange("s", f"moved/{n}.md", Op.UPSERT, version=f"v{n}") for n in range(4)}
    assert likely_deletions(stored, set(listed), listed.values()) == 0
    assert likely_deletions(stored, set(), []) == 4

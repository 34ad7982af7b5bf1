"""The embedded engine decides what changed from the manifest, and survives losing it or a cut-short write."""

from __future__ import annotations

import pytest

from headwater.store.manifest import SUFFIX

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def entries(harness) -> dict:
    return {e.uri: e for e in harness.store.manifest.entries("docs")}


def chunk_reads(harness, monkeypatch) -> list:
    """Record every read of chunk metadata (the cost the manifest exists to avoid): the uris read."""
    reads: list = []
    by_filter, by_id = harness.store.document_chunks, harness.store.chunks_of
    monkeypatch.setattr(harness.store, "document_chunks",
                        lambda source_id, uris=None: reads.append(uris) or by_filter(source_id, uris))
    monkeypatch.setattr(harness.store, "chunks_of", lambda docs: reads.append([d.uri for d in docs]) or by_id(docs))
    return reads


def test_a_pass_writes_one_entry_per_document_and_the_next_reads_only_those(harness, monkeypatch):
    harness.sync()
    records = harness.records()
    got = entries(harness)
    assert set(got) == set(records) and all(e.complete for e in got.values())
    for uri, entry in got.items():
        assert sorted(entry.ids) == sorted(records[uri]) and entry.chunker == harness.store.chunker
    reads = chunk_reads(harness, monkeypatch)
    report = harness.sync()
    assert report.unchanged == len(records) and reads == [], "an unchanged pass reads no chunk metadata"


def test_an_edit_reads_only_the_edited_documents_chunks(harness, sample, monkeypatch):
    harness.sync()
    reads = chunk_reads(harness, monkeypatch)
    (sample / "faq.html").write_text("<html><body><h1>FAQ</h1><p>Only one question remains now.</p></body></html>")
    report = harness.sync()
    assert report.updated == 1 and reads == [["faq.html"]]
    chunks = harness.records()["faq.html"]
    assert entries(harness)["faq.html"].ids == sorted(chunks, key=lambda i: chunks[i]["chunk_index"])


def test_a_collection_without_a_manifest_gets_one_on_its_next_pass(harness, sample, make_harness, monkeypatch):
    first = harness.sync()
    harness.store.client.delete_collection(harness.settings.collection + SUFFIX)  # as written before the manifest
    again = make_harness(sample)
    embedded = again.dense.texts_embedded
    report = again.sync()
    assert report.unchanged == first.added and report.chunks_embedded == 0 and again.dense.texts_embedded == embedded
    assert set(entries(again)) == set(again.records()) and again.store.manifest.covers("docs")
    reads = chunk_reads(again, monkeypatch)
    assert again.sync().unchanged == first.added and reads == []


def test_a_write_cut_short_before_its_manifest_entry_is_repaired_from_the_chunks(harness, sample, monkeypatch):
    harness.sync()
    (sample / "faq.html").write_text("<html><body><h1>FAQ</h1><p>Rotate tokens every ninety days.</p></body></html>")

    def die(written) -> None:
        if written:
            raise SystemExit("killed after the chunk writes, before the manifest write")

    with monkeypatch.context() as patch:
        patch.setattr(harness.store.manifest, "write", die)
        with pytest.raises(SystemExit):
            harness.sync()
    assert not entries(harness)["faq.html"].complete  # marked before the chunks were written
    reads = chunk_reads(harness, monkeypatch)
    report = harness.sync()
    # Its chunks were all written: they are read back, trusted, and its entry is written again.
    assert report.chunks_embedded == 0 and report.updated == 0 and ["faq.html"] in reads
    assert entries(harness)["faq.html"].complete
    assert len(reads) == 1 and harness.sync().unchanged == len(harness.records())


def test_a_write_cut_short_between_new_and_stale_chunks_is_finished_by_the_next_pass(harness, sample, monkeypatch):
    harness.sync()
    (sample / "faq.html").write_text("<html><body><h1>Questions</h1><p>Completely new answers.</p></body></html>")

    def die(_ids) -> None:
        raise SystemExit("killed after adding the new chunks, before deleting the stale ones")

    with monkeypatch.context() as patch:
        patch.setattr(harness.store, "delete", die)
        with pytest.raises(SystemExit):
            harness.sync()
    report = harness.sync()
    assert report.updated == 1 and report.chunks_deleted > 0
    entry = entries(harness)["faq.html"]
    assert entry.complete and set(entry.ids) == set(harness.records()["faq.html"])


def test_deleting_and_renaming_remove_the_old_entries(harness, sample):
    harness.sync()
    (sample / "faq.html").unlink()
    (sample / "ops" / "runbook.md").rename(sample / "ops" / "operations.md")
    report = harness.sync()
    assert report.deleted == 1 and report.moved == 1
    got = entries(harness)
    assert "faq.html" not in got and "ops/runbook.md" not in got and got["ops/operations.md"].complete
    assert set(got) == set(harness.records())

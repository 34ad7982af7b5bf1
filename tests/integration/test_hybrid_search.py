"""Hybrid retrieval over a real collection: the derived sparse index, filters, fusion, deletes."""

from __future__ import annotations

import shutil

import pytest

import headwater
from headwater.retrieval.searcher import DENSE_WEIGHT, RRF_K, SPARSE_WEIGHT, Filters, kind_of_collection
from headwater.retrieval.sparse_index import SparseIndex

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _results(index: SparseIndex, sparse, queries):
    out = []
    for query in queries:
        indices, values = sparse.encode([query])[0]
        out.append([(i, round(s, 3)) for i, s in index.search(indices, values, k=20)])
    return out


QUERIES = ["rotate the chroma token", "which file types are supported", "escalation policy queue growing",
           "rename a file", "release notes upgrade"]


def test_index_stays_identical_to_a_rebuild_through_upserts_edits_and_deletes(harness, sample):
    harness.sync()
    (sample / "ops" / "runbook.md").write_text((sample / "ops" / "runbook.md").read_text()
                                               + "\n## Backups\n\nSnapshot the Chroma directory nightly.\n")
    (sample / "faq.html").unlink()
    (sample / "connectors.csv").rename(sample / "sources.csv")
    shutil.copyfile(sample / "getting-started.md", sample / "ops" / "copy.md")
    harness.sync()
    (sample / "ops" / "copy.md").unlink()
    (sample / "notes.md").write_text("# Notes\n\nThe token rotation drill happens every quarter.\n")
    harness.sync()

    rebuilt = SparseIndex.rebuild(harness.store.collection)
    assert set(harness.index.row_of) == set(rebuilt.row_of) == set(harness.store.collection.get(include=[])["ids"])
    assert _results(harness.index, harness.sparse, QUERIES) == _results(rebuilt, harness.sparse, QUERIES)
    reloaded = SparseIndex.load(harness.index_dir)  # what another process would read from disk
    assert _results(reloaded, harness.sparse, QUERIES) == _results(rebuilt, harness.sparse, QUERIES)


def test_deleted_chunks_never_come_back(harness, sample):
    harness.sync()
    searcher = harness.searcher()
    phrase = "Frequently asked questions Does Headwater send my documents anywhere"
    assert any(h.uri == "faq.html" for h in searcher.search(phrase, k=5, mode="sparse"))
    (sample / "faq.html").unlink()
    harness.sync()
    for mode in ("dense", "sparse", "hybrid"):
        assert all(h.uri != "faq.html" for h in searcher.search(phrase, k=50, mode=mode))


def test_filters_apply_on_both_sides(harness, sample, make_harness, tmp_path):
    harness.sync()
    other = tmp_path / "other"
    other.mkdir()
    (other / "token.md").write_text("# Tokens\n\nRotate the Chroma token by updating the proxy first.\n")
    second = make_harness(other)  # same Chroma, another source
    second.connector.source_id = "other"
    second.sync()
    searcher = harness.searcher()
    searcher.index = SparseIndex.load(harness.index_dir) or SparseIndex.rebuild(harness.store.collection)

    cases = {
        Filters(source_id="other"): lambda m: m["source_id"] == "other",
        Filters(uri_prefix="ops"): lambda m: m["uri"].startswith("ops/"),
        Filters(where={"mime_type": "text/markdown"}): lambda m: m["mime_type"] == "text/markdown",
        Filters(source_id="docs", uri_prefix="ops/", where={"mime_type": "text/plain"}):
            lambda m: m["source_id"] == "docs" and m["uri"].startswith("ops/") and m["mime_type"] == "text/plain",
    }
    for filters, holds in cases.items():
        for mode in ("dense", "sparse", "hybrid"):
            hits = searcher.search("rotate the chroma token", k=10, mode=mode, filters=filters)
            assert hits, (filters, mode)
            assert all(holds(h.metadata) for h in hits), (filters, mode)
    unfiltered = searcher.search("rotate the chroma token", k=50, mode="hybrid")
    assert {h.metadata["source_id"] for h in unfiltered} == {"docs", "other"}


def test_hybrid_hits_report_each_sides_rank(harness):
    harness.sync()
    searcher = harness.searcher()
    hits = searcher.search("rotate the chroma token", k=5, mode="hybrid")
    assert hits[0].uri == "ops/runbook.md"
    assert hits[0].dense_rank == 1 and hits[0].sparse_rank == 1
    # Ranked first on both sides: the default weights over the default constant plus rank 1.
    assert hits[0].score == pytest.approx((DENSE_WEIGHT + SPARSE_WEIGHT) / (RRF_K + 1))
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert len({(h.source_id, h.uri) for h in hits}) == len(hits)  # each document once
    chunks = searcher.search("rotate the chroma token", k=5, mode="hybrid", group_by="chunk")
    assert chunks[0].dense_rank == 1 and chunks[0].sparse_rank == 1
    assert chunks[0].score == pytest.approx((DENSE_WEIGHT + SPARSE_WEIGHT) / (RRF_K + 1))


def test_a_document_hit_holds_its_matching_chunks_best_first(harness):
    harness.sync()
    searcher = harness.searcher()
    chunks = searcher.search("rotate the chroma token", k=50, mode="hybrid", group_by="chunk")
    documents = searcher.search("rotate the chroma token", k=50, mode="hybrid")
    for document in documents:
        mine = [c.id for c in chunks if (c.metadata["source_id"], c.uri) == (document.source_id, document.uri)]
        # Its chunks in the order chunk results give them (the same fusion), the best one first.
        assert [document.best_chunk.id] + [c.id for c in document.other_chunks] == mine[:1 + len(document.other_chunks)]
        assert document.matching_chunks >= len(mine)
    # Documents in the order of their best chunks among the chunk results.
    assert [d.uri for d in documents] == list(dict.fromkeys(c.uri for c in chunks))[:len(documents)]


def test_the_default_mode_is_hybrid_for_code_and_dense_for_prose(harness, sample):
    assert kind_of_collection(["a.py", "b.go", "README.md"]) == "hybrid"
    assert kind_of_collection(["a.md", "b.html", "tool.py"]) == "dense"
    assert kind_of_collection([]) == "dense"
    harness.sync()
    searcher = harness.searcher()
    assert searcher.default_mode() == "dense"  # the sample is Markdown, HTML, CSV and text
    assert [h.to_json() for h in searcher.search("rotate the chroma token", k=3)] == \
           [h.to_json() for h in searcher.search("rotate the chroma token", k=3, mode="dense")]
    prose = len([p for p in sample.rglob("*") if p.is_file()])
    for n in range(prose + 1):  # now mostly code: auto turns hybrid once the index holds it
        (sample / f"tool_{n}.py").write_text(f"def rotate_token_{n}(proxy):\n    return proxy.rotate()\n")
    harness.sync()
    assert searcher.default_mode() == "hybrid"


def test_python_api_matches_the_searcher(harness):
    harness.sync()
    searcher = harness.searcher()
    via_api = headwater.search("which file types are supported", k=5, uri_prefix="", searcher=searcher)
    direct = searcher.search("which file types are supported", k=5)
    assert [h.to_json() for h in via_api] == [h.to_json() for h in direct]


def test_a_reader_never_writes_the_writers_index(harness):
    from headwater.sync.embedded import open_sparse_index
    from headwater.retrieval.sparse_index import DIRTY, MANIFEST

    harness.sync()
    (harness.index_dir / MANIFEST).unlink()  # the saved index is unusable: the reader must rebuild
    index = open_sparse_index(harness.store, harness.index_dir, save=False)
    assert len(index) == harness.store.count()
    assert not (harness.index_dir / DIRTY).exists() and not (harness.index_dir / MANIFEST).exists()

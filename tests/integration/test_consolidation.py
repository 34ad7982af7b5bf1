"""Consolidation on the crafted corpus: real models, a real embedded Chroma, stage 1 without an LLM,
and knowledge that follows edits and deletes of its sources."""

from __future__ import annotations

import pytest

from headwater.consolidation import knowledge as kn
from headwater.consolidation import stage1
from tests.consolidation_corpus import AMBIGUOUS, EXACT, NEAR
from tests.integration.consolidation_harness import CorpusHarness

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@pytest.fixture
def corpus(tmp_path, dense, sparse) -> CorpusHarness:
    harness = CorpusHarness(tmp_path / "docs", tmp_path / "chroma", dense, sparse)
    assert not harness.sync().failed
    return harness


def _pairs_by_uri(harness: CorpusHarness, result: stage1.Stage1Result) -> set[tuple[str, str]]:
    uri = harness.uri_of()
    return {tuple(sorted((uri[p.a], uri[p.b]))) for p in result.ambiguous}


def test_stage1_settles_copies_and_only_ambiguous_pairs_reach_stage2(corpus):
    found = stage1.find_candidates(corpus.store.collection, corpus.config.thresholds())
    uri = corpus.uri_of()
    clusters = {tuple(sorted(uri[m] for m in c.members)) for c in found.clusters}
    assert clusters == {tuple(sorted(EXACT)), tuple(sorted(NEAR))}
    assert _pairs_by_uri(corpus, found) == {tuple(sorted(pair)) for pair in AMBIGUOUS}

    report = corpus.consolidator(backend=None).run(dry_run=True)
    assert report.llm_calls == 0 and report.llm_pairs == len(AMBIGUOUS)
    assert report.settled_in_stage1 == report.candidate_pairs - len(AMBIGUOUS)
    copies = [row for row in report.rows if row.decision == "duplicate"]
    assert len(copies) == 2 and all(row.method != "llm" for row in copies)
    assert corpus.knowledge.count() == 0  # a dry run writes nothing


def _check_no_orphans(corpus: CorpusHarness) -> None:
    present = set(corpus.store.collection.get(include=[])["ids"])
    for record in corpus.knowledge_records():
        assert set(record[kn.CHUNK_IDS]) <= present, record


def test_knowledge_follows_edits_and_deletes(corpus):
    texts_before = dict(zip(*[corpus.store.collection.get(include=["documents"])[k] for k in ("ids", "documents")]))
    report = corpus.consolidator(backend=None).run()
    assert report.written == 2 and report.removed == 0
    records = {tuple(sorted(r[kn.URIS])): r for r in corpus.knowledge_records()}
    assert set(records) == {tuple(sorted(EXACT)), tuple(sorted(NEAR))}
    vpn = records[tuple(sorted(EXACT))]
    assert vpn[kn.DECISION] == "duplicate" and len(vpn[kn.CHUNK_IDS]) == 2 and vpn[kn.SOURCES] == ["docs", "docs"]
    assert vpn["sparse_vector"] and len(vpn["embedding"]) == 384 and vpn[kn.DECIDED_AT]
    got = corpus.store.collection.get(include=["documents", "metadatas"])
    pointed = {m["uri"]: m.get(kn.KNOWLEDGE_IDS) for m in got["metadatas"]}
    assert pointed["handbook/vpn.md"] == [vpn["id"]] and pointed["misc/bread.md"] is None
    assert dict(zip(got["ids"], got["documents"])) == texts_before  # source text never changes

    again = corpus.consolidator(backend=None).run()  # nothing changed: nothing written
    assert again.written == again.removed == again.pointers_changed == 0

    # Edit one copy of the VPN page: the copies group no longer holds, its record goes.
    (corpus.root / "docs/it/vpn-setup.md").write_text("# VPN\n\nThe VPN moved to a new provider; see the portal.\n")
    # Delete one copy of the backups page: a group of one is no group.
    (corpus.root / "wiki/ops/backups.md").unlink()
    corpus.sync()
    report = corpus.consolidator(backend=None).run()
    assert report.removed == 2 and corpus.knowledge.count() == 0
    _check_no_orphans(corpus)
    got = corpus.store.collection.get(include=["metadatas"])
    assert all(not m.get(kn.KNOWLEDGE_IDS) for m in got["metadatas"])

    # A new copy appears: a new record, pointing at both.
    (corpus.root / "wiki/ops/backups-copy.md").write_text((corpus.root / "handbook/backups.md").read_text())
    corpus.sync()
    report = corpus.consolidator(backend=None).run()
    assert report.written == 1
    [record] = corpus.knowledge_records()
    assert sorted(record[kn.URIS]) == ["handbook/backups.md", "wiki/ops/backups-copy.md"]
    _check_no_orphans(corpus)

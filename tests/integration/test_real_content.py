"""Files nobody here wrote for the parser, in both modes: every one is indexed or skipped with a reason, none fails.

The corpus (tests/real_files.py) is written at test time: GitHub templates of HTML comments, Markdown
with YAML front matter, HTML with broken nesting, an e-mail with an attachment, docx and pptx,
and Debian's own PDFs (or one written by matplotlib where there are none). The GitHub pull request
template is the case a real repository's history hit: unstructured's Markdown path raised on it
("'NoneType' object has no attribute 'xpath'"), and the run ended complete_with_errors. Its text is
now indexed as plain text, with the parser's complaint as a warning, and the run ends `complete`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.folder import FolderConnector
from connectors.git import GitConnector
from tests.git_repos import Repository
from tests.real_files import BROKEN_HTML_LAST_PHRASE, PR_TEMPLATE, PR_TEMPLATE_PHRASE, build_corpus

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

TEMPLATE = ".github/pull_request_template.md"
BROKEN_PAGE = "site/release-notes.html"


def _texts_of(collection, uri: str) -> list[str]:  # noqa: ANN001
    return collection.get(where={"uri": uri}, include=["documents"])["documents"]


def _template_repository(root: Path) -> Repository:
    repo = Repository(root / "remote", name="service")
    repo.write(TEMPLATE, PR_TEMPLATE)
    repo.write("README.md", "# Service\n\nDeploy the service with the release pipeline.\n")
    repo.commit_and_push("templates")
    return repo


def _assert_each_indexed_or_skipped(files: dict[str, str], indexed: set[str], skipped: dict[str, str],
                                    failed: dict[str, str]) -> None:
    assert failed == {}, failed
    for path, what in files.items():
        assert path in indexed or skipped.get(path), f"{path} ({what}) was neither indexed nor skipped with a reason"


def test_real_files_are_indexed_or_skipped_with_a_reason_embedded(tmp_path, make_harness):
    corpus = tmp_path / "corpus"
    files = build_corpus(corpus)
    h = make_harness(corpus)
    h.connector = FolderConnector("docs", corpus, exclude=())  # .github is what this is about
    report = h.sync()
    records = h.records()
    _assert_each_indexed_or_skipped(files, set(records), report.skipped, report.failed)
    assert report.exit_code == 0
    assert "MD parser" in report.warnings[TEMPLATE] and "plain text" in report.warnings[TEMPLATE]
    # The warnings name only documents that were indexed regardless.
    assert set(report.warnings) <= set(records)
    hits = h.searcher().search(PR_TEMPLATE_PHRASE, k=3)
    assert hits and hits[0].uri == TEMPLATE, [hit.uri for hit in hits]
    # The broken HTML's last paragraph, which unstructured's HTML partitioner drops, is indexed too.
    assert "visible words" in report.warnings[BROKEN_PAGE]
    assert any(BROKEN_HTML_LAST_PHRASE in text for text in _texts_of(h.store.collection, BROKEN_PAGE))
    for path in ("docs/backups.md", "site/release-notes.html", "mail/capacity.eml", "office/review.docx",
                 "office/roadmap.pptx"):
        assert path in records, (path, report.skipped.get(path))


def test_the_real_repository_case_syncs_complete_through_a_git_source_embedded(tmp_path, make_harness):
    repo = _template_repository(tmp_path)
    h = make_harness(tmp_path)  # its folder connector is not used: the git source is
    connector = GitConnector("service", repo.url, branch="main", cache_dir=tmp_path / "git-cache")
    report = h.engine.sync(connector)
    assert report.failed == {} and report.added == 2, report
    assert "xpath" in report.warnings[TEMPLATE] or "MD parser" in report.warnings[TEMPLATE]
    assert any(PR_TEMPLATE_PHRASE in text for text in _texts_of(h.store.collection, TEMPLATE))


@pytest.fixture(scope="module")
def fleet_processes(tmp_path_factory):
    from tests.integration.fleet_harness import FleetProcesses
    from tests.services import chroma_server, redis_server

    root = tmp_path_factory.mktemp("real-content-fleet")
    with redis_server(root) as redis_url, chroma_server(root) as (host, port):
        processes = FleetProcesses(redis_url, host, port, root)
        processes.start_fleet()
        try:
            yield processes
        finally:
            processes.stop()


def _fleet_run(processes, collection: str, spec: dict):  # noqa: ANN001, ANN202
    from headwater.fleet.context import local_target
    from headwater.fleet.enqueue import enqueue_sync

    fleet = processes.client(collection)
    return processes.wait_for_run(fleet, enqueue_sync(fleet, spec, local_target(fleet.settings)), seconds=400)


def test_the_real_repository_case_runs_complete_in_the_fleet(fleet_processes, tmp_path):
    repo = _template_repository(tmp_path)
    spec = GitConnector("service", repo.url, branch="main", cache_dir=tmp_path / "git-cache").spec()
    run = _fleet_run(fleet_processes, "real-git", spec)
    assert run.status.value == "complete", run.to_json()
    assert "MD parser" in run.warnings[TEMPLATE] and run.to_json()["warnings"] == run.warnings
    texts = [text for text, metadata in fleet_processes.records("real-git").values() if metadata["uri"] == TEMPLATE]
    assert any(PR_TEMPLATE_PHRASE in text for text in texts)


def test_real_files_are_indexed_or_skipped_with_a_reason_in_the_fleet(fleet_processes, tmp_path):
    corpus = tmp_path / "corpus"
    files = build_corpus(corpus)
    run = _fleet_run(fleet_processes, "real-files", FolderConnector("docs", corpus, exclude=()).spec())
    indexed = fleet_processes.documents("real-files")
    _assert_each_indexed_or_skipped(files, indexed, run.skipped, run.errors)
    assert run.status.value == "complete", run.to_json()
    assert TEMPLATE in run.warnings and set(run.warnings) <= indexed
    assert "visible words" in run.warnings[BROKEN_PAGE]
    texts = [text for text, metadata in fleet_processes.records("real-files").values() if metadata["uri"] == BROKEN_PAGE]
    assert any(BROKEN_HTML_LAST_PHRASE in text for text in texts)

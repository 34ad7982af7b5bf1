"""Website sources in the fleet: the crawl fans out over two workers' fetches that share the host's
crawl-delay through Redis, against the same real loopback site as the embedded tests."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from connectors.web import WebConnector
from headwater.fleet.context import local_target
from headwater.fleet.enqueue import enqueue_sync
from tests.integration.fleet_harness import FleetProcesses
from tests.integration.web_docs_site import (CRAWL_DELAY, INTRO, METADATA_LINK, SITEMAP_ONLY, assert_page_metadata,
                                             assert_paced, build_site, date_sitemap_only, pages)
from tests.services import chroma_server, redis_server
from tests.web_site import Site, serve

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def fleet_processes(tmp_path_factory):
    root = tmp_path_factory.mktemp("web-fleet")
    with redis_server(root) as redis_url, chroma_server(root) as (host, port):
        processes = FleetProcesses(redis_url, host, port, root)
        processes.start_worker("worker-a")
        processes.start_worker("worker-b")
        processes.start_beat()
        try:
            yield processes
        finally:
            processes.stop()


@pytest.fixture
def site(tmp_path: Path):
    with serve(Site()) as running:
        build_site(running, tmp_path)
        running.clear_log()
        yield running


def crawl(processes: FleetProcesses, site: Site, collection: str, source_id: str = "docs-site",
          **options):  # noqa: ANN201
    options = {"allow_private_addresses": True, "allowed_hosts": [f"127.0.0.1:{site.port}", "169.254.169.254"],
               "timeout_seconds": 5.0, "retries": 1, "delay_seconds": 0.0, **options}
    fleet = processes.client(collection)
    spec = WebConnector(source_id, [site.url("/")], **options).spec()
    run = processes.wait_for_run(fleet, enqueue_sync(fleet, spec, local_target(fleet.settings)))
    return run


def test_fleet_crawl_shares_the_hosts_delay_and_recrawls_only_what_changed(fleet_processes, site: Site) -> None:
    processes, collection = fleet_processes, "web-fleet"
    started = datetime.now(timezone.utc).replace(microsecond=0)
    first = crawl(processes, site, collection)
    finished = datetime.now(timezone.utc)
    assert processes.documents(collection) == pages(site)
    by_uri: dict[str, dict] = {}
    for record_id, (_, metadata) in processes.records(collection).items():
        by_uri.setdefault(metadata["uri"], {})[record_id] = metadata
    # The sitemap's lastmod reaches the fetch workers through Redis.
    assert_page_metadata(site, by_uri, started, finished)
    assert set(first.errors) == {METADATA_LINK, site.url("/to-metadata")}
    assert all("cloud metadata address" in reason for reason in first.errors.values())
    # A link to a page that never existed is a broken link in the run, not a deletion.
    assert first.skipped[site.url("/missing.html")].startswith("broken link: HTTP 404")
    assert processes.client(collection).runs.states(first.id)[site.url("/missing.html")] == "skipped"
    assert not site.requests("/private/secret.html") and not site.requests("/private/from-sitemap.html")
    assert not any(r.path.count("loop") > 3 for r in site.requests())
    # Both workers fetched pages, and together they kept robots.txt's crawl-delay.
    for name in ("worker-a", "worker-b"):
        assert "headwater.fetch_document" in (processes.logs / f"{name}.log").read_text(), name
    assert_paced([r.at for r in site.requests()], CRAWL_DELAY)

    # Nothing changed: only 304s for the pages, nothing embedded. (A redirect's target is asked for
    # twice in the fleet: once behind the redirect, once as the document it leads to.)
    embedded = processes.embedded_texts()
    site.clear_log()
    again = crawl(processes, site, collection)
    assert processes.embedded_texts() == embedded
    assert again.counters["unchanged"] == len(pages(site)) and again.counters["indexed"] == 0
    for url in pages(site) - {site.url(SITEMAP_ONLY)}:
        path = url[len(site.base):]
        asked = [(r.status, r.conditional) for r in site.requests(path)]
        assert asked and set(asked) == {(304, True)}, path
    # The sitemap dates that page no later than when it was fetched: no worker asks for it.
    assert not site.requests(SITEMAP_ONLY)

    # A changed page is re-indexed, a removed one deleted, one that times out is kept, and a page
    # whose sitemap lastmod moved on is asked for again.
    site.page("/guide/intro.html", INTRO.replace("Recrawls cost only what changed.", "Recrawls in the fleet too."))
    site.remove("/guide/install.html")
    date_sitemap_only(site, "2026-12-01", "This page is listed in the sitemap and dated anew after an edit.")
    # Only that page hangs (until the pass is over); every other page has the whole timeout to answer.
    held = site.hold("/files/manual.pdf")
    kept = {i for i, (_, m) in processes.records(collection).items() if m["uri"] == site.url("/files/manual.pdf")}
    site.clear_log()
    third = crawl(processes, site, collection, timeout_seconds=3.0, retries=1)
    held.set()
    records = processes.records(collection)
    assert third.counters["indexed"] == 2
    assert [r.status for r in site.requests(SITEMAP_ONLY)] == [200]
    assert any("dated anew" in text for text, m in records.values() if m["uri"] == site.url(SITEMAP_ONLY))
    assert site.url("/guide/install.html") not in {m["uri"] for _, m in records.values()}
    assert {i for i, (_, m) in records.items() if m["uri"] == site.url("/files/manual.pdf")} == kept
    assert "timed out" in third.errors[site.url("/files/manual.pdf")]
    assert any("Recrawls in the fleet too." in text for text, m in records.values()
               if m["uri"] == site.url("/guide/intro.html"))


def test_fleet_crawl_keeps_to_max_depth_and_max_pages(fleet_processes, site: Site) -> None:
    """The limits the run's script (headwater.fleet.state's discover) enforces as fetches add links."""
    processes = fleet_processes
    crawl(processes, site, "web-fleet-depth", source_id="depth-site", max_depth=1)
    # The seeds and the pages they link to; the trap's first page links two links from a seed, never asked for.
    one_link = {site.url(p) for p in ("/", "/guide/sitemap-only.html", "/guide/intro.html", "/guide/install.html",
                                      "/files/manual.pdf", "/trap/loop/")}
    documents = processes.documents("web-fleet-depth")
    assert one_link <= documents <= pages(site), documents
    assert site.requests("/trap/loop/") and not site.requests("/trap/loop/loop/")

    site.clear_log()
    crawl(processes, site, "web-fleet-pages", source_id="pages-site", max_pages=3)
    # The two seeds and one link the first fetch to end discovered: a run of three documents.
    asked = {site.url(r.path) for r in site.requests() if not r.path.endswith((".txt", ".xml", ".xml.gz"))}
    documents = processes.documents("web-fleet-pages")
    assert len(documents) == 3 and documents <= pages(site), documents
    assert asked == documents, asked

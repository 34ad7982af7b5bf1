"""Website sources in embedded mode, against a real HTTP server on loopback (tests/web_site.py).

The site has a robots.txt with a Disallow and a crawl-delay, a sitemap index with a gzipped child
sitemap, a redirect, a 404, a link trap, a PDF, a link and a redirect to the cloud metadata
address, and ETags and Last-Modified on every page. What the crawl did is read from the server's
request log, never from how long the test took.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from connectors.web import WebConnector
from connectors.web_state import FileCrawlState
from tests.integration.web_docs_site import (CRAWL_DELAY, INTRO, METADATA_LINK, SITEMAP_ONLY, assert_page_metadata,
                                             assert_paced, build_site, date_sitemap_only, pages, served_etag)
from tests.web_site import Site, serve


@pytest.fixture
def site(tmp_path: Path):
    with serve(Site()) as running:
        build_site(running, tmp_path)
        running.clear_log()
        yield running


def web_connector(site: Site, state_dir: Path, **options) -> WebConnector:
    options = {"allow_private_addresses": True, "allowed_hosts": [f"127.0.0.1:{site.port}", "169.254.169.254"],
               "timeout_seconds": 5.0, "retries": 1, "delay_seconds": 0.0, **options}
    connector = WebConnector("docs-site", [site.url("/")], **options)
    connector.state = FileCrawlState(state_dir, "docs-site")
    return connector


def test_crawl_indexes_the_allowed_pages_and_only_them(site: Site, make_harness, tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    h.connector = web_connector(site, tmp_path / "crawl")
    started = datetime.now(timezone.utc).replace(microsecond=0)
    report = h.sync()
    finished = datetime.now(timezone.utc)
    records = h.records()

    assert set(records) == pages(site)
    # The redirect is indexed where it leads; robots.txt's Disallow holds for links and sitemap entries alike.
    assert not site.requests("/private/secret.html") and not site.requests("/private/from-sitemap.html")
    assert [r.status for r in site.requests("/missing.html")] == [404]
    assert site.requests("/old-upgrade")[0].status == 301
    # The trap stops where a path segment repeats a fourth time.
    assert not any(r.path.count("loop") > 3 for r in site.requests())
    assert any("repeats" in reason for reason in h.connector.refused.values())
    # Both ways to the metadata address are refused before any connection, and said so.
    metadata_link = METADATA_LINK
    assert "cloud metadata address" in report.failed[metadata_link]
    assert "cloud metadata address" in report.failed[site.url("/to-metadata")]
    assert set(report.failed) == {metadata_link, site.url("/to-metadata")}
    # A link to a page that never existed is a broken link in the report, not a deletion.
    assert report.skipped[site.url("/missing.html")].startswith("broken link: HTTP 404")
    assert report.deleted == 0

    # Main content with its structure; navigation and footers dropped; metadata of the page.
    install = " ".join(m["section"] or "" for m in records[site.url("/guide/install.html")].values())
    texts = h.store.collection.get(where={"uri": site.url("/guide/install.html")}, include=["documents"])["documents"]
    joined = "\n".join(texts)
    assert "pip install headwater" in joined and "delay" in joined
    assert "Footer boilerplate" not in joined and "Home" not in joined.split("\n\n", 1)[1]
    assert "Installation" in install or "Installation" in joined
    metadata = next(iter(records[site.url("/guide/install.html")].values()))
    assert metadata["doc_version"].startswith("etag:") and metadata["mime_type"] == "text/html"
    pdf = next(iter(records[site.url("/files/manual.pdf")].values()))
    assert pdf["mime_type"] == "application/pdf"
    assert_page_metadata(site, records, started, finished)

    # robots.txt's crawl-delay spaces every request after it (the server's arrival times say so).
    assert_paced([r.at for r in site.requests()], CRAWL_DELAY)
    assert all("HeadwaterBot" in r.user_agent for r in site.requests())


def test_recrawl_costs_only_what_changed(site: Site, make_harness, tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    h.connector = web_connector(site, tmp_path / "crawl")
    first = h.sync()
    assert first.chunks_embedded > 0
    indexed = h.records()

    # Nothing changed: every page is asked for conditionally and answers 304; nothing is parsed or embedded.
    site.clear_log()
    h.connector = web_connector(site, tmp_path / "crawl")
    again = h.sync()
    assert again.chunks_embedded == 0 and again.added == again.updated == again.deleted == 0
    assert again.unchanged == len(pages(site))
    for url in pages(site) - {site.url(SITEMAP_ONLY)}:
        path = url[len(site.base):]
        assert [(r.status, r.conditional) for r in site.requests(path)] == [(304, True)], path
    # The sitemap dates that page no later than when it was fetched: it is not even asked for.
    assert not site.requests(SITEMAP_ONLY)
    assert again.skipped[site.url("/missing.html")].startswith("broken link") and again.deleted == 0
    # A 304 writes nothing: the chunks still carry the fetch that produced them.
    fetched = h.records()
    assert fetched == indexed

    # A changed page is re-indexed, a removed one deleted, one that times out is kept, and a page
    # whose sitemap lastmod moved on is asked for again.
    site.page("/guide/intro.html", INTRO.replace("Recrawls cost only what changed.",
                                                 "Recrawls send conditional requests and re-embed changed chunks."))
    site.remove("/guide/install.html")
    date_sitemap_only(site, "2026-12-01", "This page is listed in the sitemap and dated anew after an edit.")
    # Only that page hangs (until the pass is over); every other page has the whole timeout to answer.
    held = site.hold("/files/manual.pdf")
    kept_before = set(h.records()[site.url("/files/manual.pdf")])
    site.clear_log()
    h.connector = web_connector(site, tmp_path / "crawl", timeout_seconds=3.0, retries=1)
    changed = h.sync()
    held.set()
    records = h.records()
    assert changed.updated == 2 and 0 < changed.chunks_embedded <= 4
    assert [r.status for r in site.requests(SITEMAP_ONLY)] == [200]
    assert any("dated anew" in t for t in h.store.collection.get(
        where={"uri": site.url(SITEMAP_ONLY)}, include=["documents"])["documents"])
    assert site.url("/guide/install.html") not in records and changed.deleted == 1
    assert set(records[site.url("/files/manual.pdf")]) == kept_before
    assert "timed out" in changed.failed[site.url("/files/manual.pdf")]
    assert any("recrawls send conditional requests" in t.lower() for t in
               h.store.collection.get(where={"uri": site.url("/guide/intro.html")}, include=["documents"])["documents"])
    # The re-indexed page's chunks, kept ones too, carry the new response's ETag and fetch time.
    intro = records[site.url("/guide/intro.html")].values()
    before = max(m["fetched_at"] for m in indexed[site.url("/guide/intro.html")].values())
    assert {m["etag"] for m in intro} == {served_etag(site, "/guide/intro.html")}
    assert all(datetime.fromisoformat(m["fetched_at"]) >= datetime.fromisoformat(before) for m in intro)


def requested_pages(site: Site) -> set[str]:
    """The URLs of every page request the server saw (robots.txt and the sitemaps are not pages)."""
    return {site.url(r.path) for r in site.requests() if not r.path.endswith((".txt", ".xml", ".xml.gz"))}


def test_max_depth_stops_the_crawl_that_many_links_from_a_seed(site: Site, make_harness, tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    h.connector = web_connector(site, tmp_path / "crawl", max_depth=1)
    h.sync()

    # Seeds (the start URL, the sitemap's page) and what they link to; the trap's first page links one
    # level deeper, which is two links from a seed, so that page is never asked for.
    one_link = {site.url(p) for p in ("/", "/guide/sitemap-only.html", "/guide/intro.html", "/guide/install.html",
                                      "/guide/upgrade.html", "/files/manual.pdf", "/trap/loop/")}
    assert set(h.records()) == one_link
    assert site.requests("/trap/loop/") and not site.requests("/trap/loop/loop/")


def test_max_pages_stops_the_crawl_after_that_many_requests(site: Site, make_harness, tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    h.connector = web_connector(site, tmp_path / "crawl", max_pages=3)
    report = h.sync()

    # Three URLs asked for, each of them a page that is indexed; nothing else was requested.
    asked = requested_pages(site)
    assert len(asked) == 3 and asked <= pages(site), asked
    assert set(h.records()) == asked and report.added == 3 and not report.failed


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "headwater.cli", *args], capture_output=True, text=True,
                          timeout=240, cwd=cwd, env={**os.environ, "COLUMNS": "200"})


@pytest.mark.timeout(400)
def test_cli_syncs_a_url_and_a_web_source_declared_in_headwater_toml(site: Site, tmp_path: Path) -> None:
    refused = _run("sync", site.url("/"), "--chroma-path", "store", cwd=tmp_path)
    assert refused.returncode == 2 and "loopback address" in refused.stdout, refused.stdout + refused.stderr
    assert site.requests() == []  # refused before any connection

    synced = _run("sync", site.url("/"), "--chroma-path", "store", "--allow-private-addresses", cwd=tmp_path)
    # The redirect to the metadata address fails (exit 2); the metadata link is on another host, so out of the crawl.
    assert synced.returncode == 2 and "cloud metadata address" in synced.stdout, synced.stdout + synced.stderr
    status = json.loads(_run("status", "--chroma-path", "store", "--json", cwd=tmp_path).stdout)
    assert status[site.url("/")]["documents"] == len(pages(site))

    (tmp_path / "headwater.toml").write_text(
        '[[sources]]\nid = "docs"\nkind = "web"\ncollection = "docs"\n'
        f'options = {{ start_urls = ["{site.url("/")}"], include = ["/", "/guide/*"], allow_private_addresses = true }}\n')
    declared = _run("sync", "docs", "--chroma-path", "store", cwd=tmp_path)
    assert declared.returncode == 0, declared.stdout + declared.stderr
    status = json.loads(_run("status", "--chroma-path", "store", "--collection", "docs", "--json", cwd=tmp_path).stdout)
    assert status["docs"]["documents"] == 4  # the start page and the guide pages it and the sitemap reach

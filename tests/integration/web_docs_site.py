"""The documentation site the web-source tests crawl: robots.txt with a Disallow and a crawl-delay, a
sitemap index with a gzipped child sitemap, a redirect, a 404, a link trap, a PDF, a link and a
redirect to the cloud metadata address."""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from pathlib import Path

from tests.documents import write_pdf
from tests.web_site import Route, Site, gzipped, sitemap_index, urlset

CRAWL_DELAY = 0.3
SITEMAP_ONLY = "/guide/sitemap-only.html"  # linked from nowhere; the sitemap dates it
NAV = "<nav><ul><li><a href='/'>Home</a></li><li><a href='/guide/intro.html'>Intro</a></li></ul></nav>"
FOOTER = "<footer>Footer boilerplate: copyright the Example project, all rights reserved.</footer>"


def doc_page(title: str, body: str, links: str = "") -> str:
    return (f"<html><head><title>{title}</title></head><body>{NAV}<main><article><h1>{title}</h1>{body}"
            f"</article></main>{links}{FOOTER}</body></html>")


INTRO = doc_page("Introduction", "<p>Headwater keeps a documentation website in sync with a Chroma collection. "
                 "It crawls politely and indexes the main content of every page.</p>"
                 "<h2>Why</h2><ul><li>Recrawls cost only what changed.</li><li>Removed pages are deleted.</li></ul>")
INSTALL = doc_page("Installation", "<p>Install the package with pip and run the sync command against the site.</p>"
                   "<pre><code>pip install headwater\nheadwater sync https://docs.example.com/</code></pre>"
                   "<table><tr><th>option</th><th>default</th></tr><tr><td>delay</td><td>0.5</td></tr></table>")


def build_site(site: Site, tmp: Path) -> None:
    base = site.base
    site.page("/robots.txt", f"User-agent: *\nDisallow: /private/\nCrawl-delay: {CRAWL_DELAY}\n"
                             f"Sitemap: {base}/sitemap_index.xml\n", "text/plain")
    site.page("/sitemap_index.xml", sitemap_index(f"{base}/sitemaps/pages.xml.gz"), "application/xml")
    _sitemap(site, "2026-11-30")
    links = ("<a href='/guide/intro.html#why'>Intro</a> <a href='guide/install.html?utm_source=nav'>Install</a> "
             "<a href='/old-upgrade'>Upgrade</a> <a href='/missing.html'>Missing</a> "
             "<a href='/private/secret.html'>Secret</a> <a href='/trap/loop/'>Trap</a> "
             "<a href='/files/manual.pdf'>Manual</a> <a href='/to-metadata'>Metadata</a> "
             "<a href='http://169.254.169.254/latest/meta-data/'>Metadata link</a> "
             "<a href='https://example.com/elsewhere'>Elsewhere</a>")
    site.page("/", doc_page("Example docs", "<p>Welcome to the Example project documentation.</p>", links))
    site.page("/guide/intro.html", INTRO)
    site.page("/guide/install.html", INSTALL)
    site.redirect("/old-upgrade", "/guide/upgrade.html")
    site.page("/guide/upgrade.html", doc_page("Upgrading", "<p>Upgrading between versions keeps the collection; "
                                                           "re-run the sync after upgrading.</p>"))
    site.page(SITEMAP_ONLY, doc_page("Sitemap only", "<p>This page is listed in the sitemap and "
                                                     "linked from nowhere, yet it is indexed.</p>"))
    site.page("/private/secret.html", doc_page("Secret", "<p>Robots.txt keeps crawlers out of here.</p>"))
    site.page("/private/from-sitemap.html", doc_page("Secret too", "<p>Listed in the sitemap, still disallowed.</p>"))
    site.page("/files/manual.pdf", write_pdf(tmp / "manual.pdf", [["Operator manual", "Rotate the Chroma token "
                                                                   "every ninety days."]]).read_bytes(),
              "application/pdf")
    site.redirect("/to-metadata", "http://169.254.169.254/latest/meta-data/", 302)
    # Every page under /trap/ links one level deeper: an endless site unless the crawl sees the pattern.
    site.generated["/trap/"] = lambda path: Route(doc_page("Trap", "<p>Deeper and deeper.</p>",
                                                           "<a href='loop/'>deeper</a>").encode())


def _sitemap(site: Site, lastmod: str) -> None:
    site.page("/sitemaps/pages.xml.gz", gzipped(urlset((f"{site.base}{SITEMAP_ONLY}", lastmod),
                                                       (f"{site.base}/private/from-sitemap.html", None))),
              "application/gzip")


def date_sitemap_only(site: Site, lastmod: str, text: str) -> None:
    """Edit the sitemap-only page and give it a newer lastmod in the sitemap, as a site generator does."""
    site.page(SITEMAP_ONLY, doc_page("Sitemap only", f"<p>{text}</p>"))
    _sitemap(site, lastmod)


def assert_paced(arrivals: list[float], delay: float) -> None:
    """Requests arrived at least `delay` apart on average, and none close together.

    Arrival times carry the server's scheduling jitter (a busy machine delays one arrival and so
    shortens the next gap), so single gaps are held to half the delay; unpaced requests would
    arrive milliseconds apart and fail both checks.
    """
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    assert len(gaps) >= 5, gaps
    assert (arrivals[-1] - arrivals[0]) / len(gaps) >= delay * 0.9, gaps
    assert min(gaps) >= delay * 0.5, gaps


def pages(site: Site) -> set[str]:
    return {site.url(p) for p in ("/", "/guide/intro.html", "/guide/install.html", "/guide/upgrade.html",
                                  "/guide/sitemap-only.html", "/files/manual.pdf", "/trap/loop/", "/trap/loop/loop/",
                                  "/trap/loop/loop/loop/")}


METADATA_LINK = "http://169.254.169.254/latest/meta-data/"


def served_etag(site: Site, path: str) -> str:
    """The ETag tests/web_site.py sends for a route: the hash of its body."""
    return '"' + hashlib.sha256(site.route(path).body).hexdigest()[:16] + '"'


def iso(timestamp: float) -> str:
    return datetime.fromtimestamp(int(timestamp), timezone.utc).isoformat()


def assert_page_metadata(site: Site, records: dict[str, dict], started: datetime, finished: datetime) -> None:
    """Every chunk of a page carries its url, title, fetched time, lastmod and ETag."""
    titles = {"/": "Example docs", "/guide/install.html": "Installation", "/guide/sitemap-only.html": "Sitemap only"}
    for url in pages(site):
        path = url[len(site.base):]
        for metadata in records[url].values():
            assert metadata["url"] == url, (path, metadata)
            assert metadata["etag"] == served_etag(site, path), (path, metadata)
            assert started <= datetime.fromisoformat(metadata["fetched_at"]) <= finished, (path, metadata)
            # The sitemap's lastmod where it gives one, else the Last-Modified header (the trap's pages
            # are made up on request, so theirs is when they were asked for).
            if path == "/guide/sitemap-only.html":
                assert metadata["lastmod"] == "2026-11-30T00:00:00+00:00", metadata
            elif path.startswith("/trap/"):
                assert started <= datetime.fromisoformat(metadata["lastmod"]) <= finished, (path, metadata)
            else:
                assert metadata["lastmod"] == iso(site.route(path).modified), (path, metadata)
            if path in titles:
                assert metadata["title"] == titles[path], (path, metadata)

"""Website sources: crawl rate, a full embedded sync of a documentation site, and what a recrawl costs.

Site: the Python documentation as Debian's `python3.11-doc` package installs it
(/usr/share/doc/python3.11/html, 530 HTML pages of real Sphinx output: navigation, footers, code),
served on loopback by a threaded HTTP server with ETags and Last-Modified (tests/web_site.py).
Nothing is generated and nothing is shipped: install the package (`apt-get install python3.11-doc`)
or point --root at another installed HTML tree.

* Crawl only: the connector's listing (robots.txt, links, fetches) with no parsing or embedding,
  first from nothing (every page 200), then again with the crawl state (every page 304).
* Full sync: `engine.sync(connector)` on a fresh collection (crawl, main-content extraction,
  parsing, chunking, dense and SPLADE embedding, writes), then a recrawl of the unchanged site
  (must embed nothing), then a recrawl after one page changed (must re-embed only its changed chunks).

The crawl runs with no delay (the server is on loopback and ours): what is measured is the
crawler's own cost, not a politeness setting. Compare figures of one run; the machine may be
shared, so the load average is printed with them.

Run: ``python -m bench.crawl [--root DIR] [--limit N] [--concurrency N]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from time import perf_counter, process_time

DEFAULT_ROOT = Path("/usr/share/doc/python3.11/html")
# Sphinx's own directories hold sources, images and scripts, not pages.
EXCLUDE = ("/_sources/*", "/_static/*", "/_images/*", "/_downloads/*")


def connector_for(site, state_dir: Path | None, limit: int, concurrency: int):  # noqa: ANN001, ANN201
    from connectors.web import WebConnector
    from connectors.web_state import FileCrawlState

    connector = WebConnector("python-docs", [site.url("/index.html")], exclude=EXCLUDE, max_pages=limit,
                             allow_private_addresses=True, delay_seconds=0.0, concurrency=concurrency)
    if state_dir is not None:
        connector.state = FileCrawlState(state_dir, "python-docs")
    return connector


def crawl_only(site, state_dir: Path, limit: int, concurrency: int) -> tuple[int, float, float]:  # noqa: ANN001
    """(pages listed, seconds, process CPU seconds) of one listing."""
    connector = connector_for(site, state_dir, limit, concurrency)
    c0, t0 = process_time(), perf_counter()
    pages = sum(1 for _ in connector.list_documents())
    seconds, cpu = perf_counter() - t0, process_time() - c0
    connector.close()
    return pages, seconds, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="an installed HTML documentation tree")
    parser.add_argument("--limit", type=int, default=10_000, help="most pages to crawl")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight to the host")
    parser.add_argument("--crawl-only", action="store_true", help="skip the full sync (no models)")
    args = parser.parse_args(argv)
    if not (args.root / "index.html").is_file():
        print(f"{args.root} has no index.html; install python3.11-doc (Debian) or pass --root", file=sys.stderr)
        return 1

    from tests.web_site import Site, serve

    html_pages = sum(1 for _ in args.root.rglob("*.html"))
    tmp = Path(tempfile.mkdtemp(prefix="headwater-crawl-bench-"))
    try:
        with serve(Site(root=args.root)) as site:
            print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
            print(f"site: {args.root} ({html_pages} HTML files) on {site.base}, concurrency {args.concurrency}, no delay")
            pages, first_s, first_cpu = crawl_only(site, tmp / "crawl-only", args.limit, args.concurrency)
            site.clear_log()
            again, again_s, again_cpu = crawl_only(site, tmp / "crawl-only", args.limit, args.concurrency)
            statuses = {r.status for r in site.requests() if not r.path.endswith("robots.txt")}
            print(f"crawl only, first:   {pages} pages in {first_s:.2f} s = {pages / first_s:.0f} pages/s "
                  f"(process CPU {first_cpu:.2f} s)")
            print(f"crawl only, again:   {again} pages in {again_s:.2f} s = {again / again_s:.0f} pages/s "
                  f"(process CPU {again_cpu:.2f} s; statuses {sorted(statuses)})")
            if args.crawl_only:
                return 0
            full = full_sync(site, tmp, args.limit, args.concurrency)
            print(f"load average {os.getloadavg()[0]:.2f} at end")
            print()
            print("| site | pages | crawl only (200s) | recrawl, crawl only (304s) | full sync | "
                  "unchanged recrawl | one page changed |")
            print("|---|---|---|---|---|---|---|")
            print(f"| Python 3.11 docs, {html_pages} HTML files | {pages} | {pages / first_s:.0f} pages/s | "
                  f"{again / again_s:.0f} pages/s | {full['pages'] / full['first']:.1f} pages/s "
                  f"({full['first']:.0f} s, {full['chunks']} chunks) | {full['unchanged']:.1f} s, "
                  f"{full['unchanged_embedded']} embedded | {full['edited']:.1f} s, {full['edited_embedded']} "
                  f"chunks embedded |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def full_sync(site, tmp: Path, limit: int, concurrency: int) -> dict:  # noqa: ANN001
    """First sync, unchanged recrawl and one-page-changed recrawl through the embedded engine."""
    from headwater.sync.embedded import open_engine
    from headwater.settings import load_settings

    settings = load_settings(chroma_path=tmp / "chroma", collection="bench")
    with open_engine(settings) as engine:
        c0, t0 = process_time(), perf_counter()
        first = engine.sync(connector_for(site, tmp / "crawl", limit, concurrency))
        first_s, first_cpu = perf_counter() - t0, process_time() - c0
        pages = first.added + first.updated + first.unchanged
        print(f"full sync, first:    {pages} pages in {first_s:.1f} s = {pages / first_s:.1f} pages/s "
              f"({first.chunks_written} chunks, {first.chunks_embedded} embedded; process CPU {first_cpu:.1f} s; "
              f"{len(first.failed)} failed, {len(first.skipped)} skipped)")
        t0 = perf_counter()
        unchanged = engine.sync(connector_for(site, tmp / "crawl", limit, concurrency))
        unchanged_s = perf_counter() - t0
        print(f"recrawl, unchanged:  {unchanged_s:.2f} s, {unchanged.unchanged} unchanged, "
              f"{unchanged.chunks_embedded} embedded")
        path = "/library/json.html"
        page = site.route(path)
        site.page(path, page.body.replace(b"lightweight data interchange format",
                                          b"lightweight, text-based data interchange format"))
        t0 = perf_counter()
        edited = engine.sync(connector_for(site, tmp / "crawl", limit, concurrency))
        edited_s = perf_counter() - t0
        print(f"recrawl, {path} changed: {edited_s:.2f} s, {edited.updated} updated, "
              f"{edited.chunks_embedded} chunks embedded")
    return {"pages": pages, "first": first_s, "chunks": first.chunks_written, "unchanged": unchanged_s,
            "unchanged_embedded": unchanged.chunks_embedded, "edited": edited_s,
            "edited_embedded": edited.chunks_embedded}


if __name__ == "__main__":
    raise SystemExit(main())

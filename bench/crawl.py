"""Website sources with default options: a first crawl, an unchanged recrawl and a recrawl after one edit.

Site: a local copy of a real documentation site installed by a Debian package (default: the
PostgreSQL manual of `postgresql-doc-15`, /usr/share/doc/postgresql-doc-15/html; the Python
docs of `python3.11-doc` or any other installed HTML tree work too), copied to a temporary
directory and served on loopback by Python's own `http.server` (SimpleHTTPRequestHandler: a
Last-Modified on every file, 304 for an If-Modified-Since no older than it, no ETags, no
robots.txt, no sitemap). Nothing is generated and nothing is shipped: install the package
(`apt-get install postgresql-doc-15`) or pass another directory.

The connector runs with its DEFAULT options (delay_seconds 0.5, concurrency 2: the politeness
a user gets), except `allow_private_addresses` (the site is on loopback) and the page limit.
Each pass is `engine.sync(connector)` on one embedded collection, so the first pass includes
main-content extraction, parsing, chunking, dense and SPLADE embedding and writes, and the
recrawls include everything a recrawl costs. Printed per pass: wall time, requests the server
answered (by status), and what the pass did. Then the edited page must be found by the next pass.

Run: ``python -m bench.crawl [ROOT] [--limit N] [--delay S] [--concurrency N] [--crawl-only]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
from collections import Counter
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from time import perf_counter, process_time

ROOTS = (Path("/usr/share/doc/postgresql-doc-15/html"), Path("/usr/share/doc/python3.11/html"))
# Sphinx's own directories hold sources, images and scripts, not pages.
EXCLUDE = ("/_sources/*", "/_static/*", "/_images/*", "/_downloads/*")
EDIT = "Edited by bench.crawl: the lighthouse keeper's logbook."


class _Counted(SimpleHTTPRequestHandler):
    """Python's static file handler, quiet, counting the statuses it answers."""

    statuses: Counter
    lock: threading.Lock

    def log_message(self, format: str, *args) -> None:  # noqa: A002
        pass

    def send_response(self, code: int, message: str | None = None) -> None:
        with self.lock:
            self.statuses[code] += 1
        super().send_response(code, message)


@contextmanager
def serve_directory(root: Path):  # noqa: ANN201
    """Python's http.server over `root` on a free loopback port; yields (base URL, status counter)."""
    statuses: Counter = Counter()
    handler = type("Handler", (_Counted,), {"statuses": statuses, "lock": threading.Lock()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(root)))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", statuses
    finally:
        server.shutdown()
        server.server_close()


def connector_for(base: str, state_dir: Path, args: argparse.Namespace):  # noqa: ANN201
    from connectors.web import WebConnector
    from connectors.web_state import FileCrawlState

    options = {"max_pages": args.limit, "exclude": EXCLUDE, "allow_private_addresses": True}
    if args.delay is not None:
        options["delay_seconds"] = args.delay
    if args.concurrency is not None:
        options["concurrency"] = args.concurrency
    connector = WebConnector("docs", [f"{base}/index.html"], **options)
    connector.state = FileCrawlState(state_dir, "docs")
    return connector


def _pass(name: str, run, statuses: Counter) -> tuple[float, int, object]:  # noqa: ANN001
    statuses.clear()
    c0, t0 = process_time(), perf_counter()
    result = run()
    seconds, cpu = perf_counter() - t0, process_time() - c0
    requests = sum(statuses.values())
    print(f"{name:<22} {seconds:7.2f} s wall, {cpu:6.2f} s process CPU, {requests:5d} requests "
          f"({', '.join(f'{n} x {s}' for s, n in sorted(statuses.items()))})")
    return seconds, requests, result


def edit_a_page(copy: Path, pages: list[str]) -> Path:
    """Append a sentence to the main text of a page the crawl indexed (its mtime moves on)."""
    for uri in pages:
        path = copy / uri.split("/", 3)[-1]
        if path.suffix == ".html" and path.name != "index.html" and path.is_file():
            html = path.read_text(encoding="utf-8", errors="replace")
            if "</p>" in html:
                path.write_text(html.replace("</p>", f" {EDIT}</p>", 1), encoding="utf-8")
                stat = path.stat()
                os.utime(path, (stat.st_atime, stat.st_mtime + 2))  # http.server's dates have 1 s steps
                return path
    raise SystemExit("no page with a paragraph to edit among the crawled pages")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", type=Path, default=next((r for r in ROOTS if r.is_dir()), ROOTS[0]),
                        help="an installed HTML documentation tree (default: the PostgreSQL manual)")
    parser.add_argument("--limit", type=int, default=60, help="most pages to crawl (max_pages)")
    parser.add_argument("--delay", type=float, default=None, help="delay_seconds (default: the connector's)")
    parser.add_argument("--concurrency", type=int, default=None, help="concurrency (default: the connector's)")
    parser.add_argument("--crawl-only", action="store_true", help="list the site only (no parsing or models)")
    args = parser.parse_args(argv)
    if not (args.root / "index.html").is_file():
        print(f"{args.root} has no index.html; `apt-get install postgresql-doc-15` (Debian) or pass a directory",
              file=sys.stderr)
        return 1
    tmp = Path(tempfile.mkdtemp(prefix="headwater-crawl-bench-"))
    try:
        copy = tmp / "site"
        shutil.copytree(args.root, copy)
        html_files = sum(1 for _ in copy.rglob("*.html"))
        with serve_directory(copy) as (base, statuses):
            probe = connector_for(base, tmp / "probe", args)
            print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
            print(f"site: a copy of {args.root} ({html_files} HTML files) served by http.server on {base}; "
                  f"max_pages {args.limit}, delay_seconds {probe.delay_seconds}, concurrency {probe.concurrency}")
            if args.crawl_only:
                return crawl_only(base, tmp, args, statuses, copy)
            return full_sync(base, tmp, args, statuses, copy)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def crawl_only(base: str, tmp: Path, args: argparse.Namespace, statuses: Counter, copy: Path) -> int:
    from headwater.sync.crawl_pass import CrawlPass

    def listing() -> list[str]:
        connector = connector_for(base, tmp / "crawl", args)
        try:
            return [c.uri for c in CrawlPass(connector).changes()]
        finally:
            connector.close()

    first_s, first_n, pages = _pass("crawl only, first", listing, statuses)
    again_s, again_n, _ = _pass("crawl only, unchanged", listing, statuses)
    print(f"unchanged / first: {again_s / first_s:.2f} of the wall time, {again_n} of {first_n} requests "
          f"({len(pages)} pages)")
    return 0


def full_sync(base: str, tmp: Path, args: argparse.Namespace, statuses: Counter, copy: Path) -> int:
    from headwater.sync.embedded import open_engine
    from headwater.settings import load_settings

    settings = load_settings(chroma_path=tmp / "chroma", collection="bench")
    with open_engine(settings) as engine:
        def sync():  # noqa: ANN202
            return engine.sync(connector_for(base, tmp / "crawl", args))

        first_s, first_n, first = _pass("first crawl", sync, statuses)
        print(f"  {first.added} pages added, {first.chunks_embedded} chunks embedded, "
              f"{len(first.failed)} failed, {len(first.skipped)} skipped")
        again_s, again_n, again = _pass("unchanged recrawl", sync, statuses)
        print(f"  {again.unchanged} unchanged, {again.added + again.updated} re-indexed, "
              f"{again.chunks_embedded} chunks embedded")
        pages = sorted(d for d in engine.store.documents("docs"))
        edited = edit_a_page(copy, pages)
        edit_s, edit_n, changed = _pass("recrawl after an edit", sync, statuses)
        found = engine.store.collection.get(where_document={"$contains": EDIT}, include=["metadatas"])
        uris = sorted({m["uri"] for m in found["metadatas"]})
        print(f"  {changed.updated} updated, {changed.chunks_embedded} chunks embedded; the edit of "
              f"{edited.relative_to(copy)} is found in {uris or 'nothing'}")
    print()
    print(f"unchanged recrawl / first crawl: {again_s / first_s:.3f} of the wall time "
          f"({again_s:.2f} s / {first_s:.2f} s), {again_n} / {first_n} requests")
    print("| site | pages | first crawl | unchanged recrawl | ratio | recrawl after one edit |")
    print("|---|---|---|---|---|---|")
    print(f"| {args.root} | {first.added} | {first_s:.1f} s, {first_n} requests | {again_s:.2f} s, {again_n} requests "
          f"| {again_s / first_s:.3f} | {edit_s:.2f} s, {edit_n} requests, {changed.updated} updated |")
    return 0 if uris else 1


if __name__ == "__main__":
    raise SystemExit(main())

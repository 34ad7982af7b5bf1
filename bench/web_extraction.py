"""Main content of web pages: trafilatura (main content as Markdown, read into blocks) against
unstructured's HTML partitioning of the whole page, on real documentation pages.

Pages: every n-th HTML page of the Python documentation as Debian's `python3.11-doc` installs it
(real Sphinx output: sidebars, navigation bars, footers, code blocks, tables).

For each extractor, over the same pages:
* CPU time per page (process time, so other work on a shared machine counts less);
* boilerplate: the share of output text in lines that recur on at least half of the pages
  (navigation, breadcrumbs, footers, "Previous topic" boxes are the same on every page);
* code kept: the share of the pages' <pre> blocks whose first line appears in the output;
* tables kept: the share of <table> cells (first cell of each table) that appear in the output.

Run: ``python -m bench.web_extraction [--root DIR] [--pages N]``.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections import Counter
from pathlib import Path
from time import process_time

DEFAULT_ROOT = Path("/usr/share/doc/python3.11/html")


def trafilatura_lines(html: bytes, url: str) -> list[str]:
    from headwater.pipeline.parse import parse_document

    return [e.text for e in parse_document(url, html, "text/html").elements]


def unstructured_lines(html: bytes, url: str) -> list[str]:
    from unstructured.partition.html import partition_html

    return [e.text for e in partition_html(file=io.BytesIO(html)) if e.text and e.text.strip()]


def probes(html: bytes) -> tuple[list[str], list[str]]:
    """First lines of the page's <pre> blocks and first cells of its tables."""
    import lxml.html

    tree = lxml.html.fromstring(html)
    main = tree.xpath("//div[@role='main']") or [tree]
    code = [line.strip() for pre in main[0].xpath(".//pre")
            for line in pre.text_content().splitlines()[:1] if len(line.strip()) > 8]
    cells = [cell.text_content().strip() for table in main[0].xpath(".//table")
             for cell in table.xpath(".//td")[:1] if len(cell.text_content().strip()) > 3]
    return code, cells


def measure(name: str, extract, pages: list[Path], root: Path) -> dict:  # noqa: ANN001
    outputs: list[list[str]] = []
    c0 = process_time()
    for page in pages:
        outputs.append(extract(page.read_bytes(), "http://docs.local/" + page.relative_to(root).as_posix()))
    cpu = process_time() - c0
    recurring = Counter(line for lines in outputs for line in set(lines))
    common = {line for line, n in recurring.items() if n >= len(pages) / 2}
    total = sum(len(line) for lines in outputs for line in lines)
    boiler = sum(len(line) for lines in outputs for line in lines if line in common)
    code_found = code_total = cells_found = cells_total = 0
    for page, lines in zip(pages, outputs):
        text = "\n".join(lines)
        code, cells = probes(page.read_bytes())
        code_total += len(code)
        code_found += sum(1 for c in code if c in text)
        cells_total += len(cells)
        cells_found += sum(1 for c in cells if c in text)
    return {"name": name, "ms": 1000 * cpu / len(pages), "boilerplate": boiler / max(total, 1),
            "code": code_found / max(code_total, 1), "cells": cells_found / max(cells_total, 1),
            "chars": total / len(pages), "code_total": code_total, "cells_total": cells_total}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    parser.add_argument("--pages", type=int, default=60)
    args = parser.parse_args(argv)
    every = sorted(p for p in args.root.rglob("*.html") if "_static" not in p.parts and "genindex" not in p.name)
    pages = every[:: max(1, len(every) // args.pages)][: args.pages]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
          f"{len(pages)} pages of {args.root}")
    trafilatura_lines(pages[0].read_bytes(), "http://docs.local/warm")  # imports and model loads out of the timing
    unstructured_lines(pages[0].read_bytes(), "http://docs.local/warm")
    results = [measure("trafilatura (main content as Markdown blocks)", trafilatura_lines, pages, args.root),
               measure("unstructured partition_html", unstructured_lines, pages, args.root)]
    print()
    print("| extractor | CPU per page | boilerplate share | code blocks kept | table cells kept | characters per page |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['name']} | {r['ms']:.0f} ms | {r['boilerplate']:.1%} | {r['code']:.0%} of {r['code_total']} | "
              f"{r['cells']:.0%} of {r['cells_total']} | {r['chars']:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

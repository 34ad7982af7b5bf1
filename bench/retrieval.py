"""Retrieval quality of dense, sparse (SPLADE) and hybrid (RRF) search, on text nobody wrote for this project.

Corpus: the docstrings of the running interpreter's standard-library modules (top-level `*.py`),
one Markdown document per module (`<module>.md`: the module docstring, then a section per public
class and function). Queries: the labelled set in QUERIES below, each a plain-English need whose
answer is one module; none names its module. A query counts as found at rank r when the r-th
distinct document among the hits is its module's. Reported: recall@10 and MRR@10 per mode, and
query latency p50/p95 (query encoding included) on this corpus.

Run: `python -m bench.retrieval [--keep]` (syncs the corpus into a temporary embedded Chroma).
"""

from __future__ import annotations

import argparse
import ast
import shutil
import statistics
import sysconfig
import tempfile
from pathlib import Path
from time import perf_counter

K = 10

# need -> the module whose documentation answers it
QUERIES: dict[str, str] = {
    "parse command-line options, positional arguments and sub-commands": "argparse",
    "read and write comma separated value files with dialects": "csv",
    "compare sequences and compute the differences between lines of text": "difflib",
    "send an email message through a mail server": "smtplib",
    "wrap and fill paragraphs of plain text to a given width": "textwrap",
    "copy files and remove whole directory trees": "shutil",
    "shell-style wildcard matching of file names": "fnmatch",
    "generate pseudo-random numbers and shuffle a list": "random",
    "mean, median, standard deviation and variance of data": "statistics",
    "priority queue implemented as a binary heap": "heapq",
    "insert into a list while keeping it sorted": "bisect",
    "exact arithmetic on rational numbers with numerator and denominator": "fractions",
    "serialize Python objects to a byte stream and back": "pickle",
    "persistent dictionary stored in a database file": "shelve",
    "create temporary files and directories that are removed automatically": "tempfile",
    "dates, times, durations and time zone offsets": "datetime",
    "leap years and the weekday of a given date, print a month": "calendar",
    "shallow and deep copies of objects": "copy",
    "get the source code and call signature of a function at runtime": "inspect",
    "run a child process, connect to its pipes and read its return code": "subprocess",
    "locks, events and conditions for running code in parallel threads": "threading",
    "exchange items safely between producer and consumer threads": "queue",
    "encode binary data as printable ASCII text with base 16, 32 or 64": "base64",
    "compute a SHA-256 or MD5 digest of some bytes": "hashlib",
    "authenticate a message with a secret key and a hash": "hmac",
    "generate hard-to-guess tokens suitable for passwords and security": "secrets",
    "universally unique identifiers from random numbers or host and time": "uuid",
    "read and write ZIP archives": "zipfile",
    "read and write tar archives, optionally compressed": "tarfile",
    "compress a file the way the gzip program does": "gzip",
    "configuration files with sections and key value pairs, INI style": "configparser",
    "split a string into words the way a Unix shell does, with quoting": "shlex",
    "declare abstract methods that subclasses must implement": "abc",
    "classes with automatically generated __init__ and __repr__ from annotated fields": "dataclasses",
    "a set of symbolic names bound to unique constant values": "enum",
    "partial application, caching of results and reducing a sequence with a function": "functools",
    "object-oriented filesystem paths": "pathlib",
    "step through a program line by line with breakpoints": "pdb",
    "deterministic profiling of where a program spends its time": "profile",
    "measure the execution time of small code snippets": "timeit",
    "print nested data structures in a readable, indented form": "pprint",
    "template strings with dollar-sign substitution and common character constants": "string",
    "low-level networking: connect, bind, listen and accept connections": "socket",
    "wait for I/O readiness on many file objects efficiently": "selectors",
    "refer to an object without keeping it alive": "weakref",
    "utilities for with-statement context managers, suppressing exceptions": "contextlib",
    "translate program messages into other languages": "gettext",
    "find path names matching a pattern, recursively": "glob",
    "guess the type of a file from its name or URL extension": "mimetypes",
    "print or format the stack trace of an exception": "traceback",
    "issue alerts about deprecated features and control which are shown": "warnings",
    "compression with the LZMA algorithm, .xz files": "lzma",
    "bzip2 compression and decompression": "bz2",
    "split Python source code into tokens": "tokenize",
    "IPv4 and IPv6 addresses and networks": "ipaddress",
    "run events at given times with a general purpose scheduler": "sched",
}


def build_corpus(target: Path) -> int:
    """One Markdown document of docstrings per stdlib module; returns how many were written."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    written = 0
    for source in sorted(stdlib.glob("*.py")):
        try:
            tree = ast.parse(source.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        parts = [f"# {source.stem}"]
        if doc := ast.get_docstring(tree):
            parts.append(doc)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                if doc := ast.get_docstring(node):
                    parts.append(f"## {node.name}\n\n{doc}")
        if len(parts) > 1:
            (target / f"{source.stem}.md").write_text("\n\n".join(parts) + "\n", encoding="utf-8")
            written += 1
    missing = sorted({m for m in QUERIES.values() if not (target / f"{m}.md").exists()})
    if missing:
        raise SystemExit(f"the labelled set needs modules this Python lacks: {', '.join(missing)}")
    return written


def first_relevant_rank(uris: list[str], relevant: str) -> int | None:
    """Rank (from 1) of the relevant document among the distinct documents in `uris`, within K."""
    seen: list[str] = []
    for uri in uris:
        if uri not in seen:
            seen.append(uri)
        if len(seen) > K:
            break
        if uri == relevant:
            return len(seen)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary corpus and Chroma")
    parser.add_argument("--reuse", type=Path, help="a directory kept by an earlier --keep run: query it again")
    args = parser.parse_args()

    from connectors import build_connector
    from headwater.embedded import open_engine
    from headwater.retrieval import open_searcher
    from headwater.settings import load_settings

    workdir = args.reuse or Path(tempfile.mkdtemp(prefix="headwater-retrieval-"))
    try:
        corpus = workdir / "corpus"
        settings = load_settings(chroma_path=workdir / "chroma", collection="retrieval")
        if not args.reuse:
            corpus.mkdir()
            build_corpus(corpus)
        started = perf_counter()
        # A reused collection is synced again too: that is a no-op unless the corpus changed.
        with open_engine(settings) as engine:
            engine.sync(build_connector("folder", "stdlib-docs", path=corpus))
            chunks = engine.store.count()
        documents = sum(1 for _ in corpus.glob("*.md"))
        print(f"corpus: {documents} module documents, {chunks} chunks (synced in {perf_counter() - started:.0f} s); "
              f"{len(QUERIES)} labelled queries")

        searcher = open_searcher(settings)
        # Hits are chunks; fetching a few times K keeps K distinct documents in view.
        depth = 5 * K
        for query in list(QUERIES)[:3]:
            searcher.search(query, k=depth)  # warm up caches and lazy initialisation
        rows = []
        for mode in ("dense", "sparse", "hybrid"):
            ranks, latencies = [], []
            for query, module in QUERIES.items():
                started = perf_counter()
                hits = searcher.search(query, k=depth, mode=mode)
                latencies.append((perf_counter() - started) * 1000)
                ranks.append(first_relevant_rank([h.uri for h in hits], f"{module}.md"))
            found = [r for r in ranks if r is not None]
            recall = len(found) / len(ranks)
            mrr = sum(1 / r for r in found) / len(ranks)
            p50 = statistics.median(latencies)
            p95 = statistics.quantiles(latencies, n=20)[-1]
            rows.append((mode, recall, mrr, p50, p95))
            misses = [q for q, r in zip(QUERIES, ranks) if r is None]
            print(f"{mode:>7}: recall@{K} {recall:.3f}  MRR@{K} {mrr:.3f}  latency p50 {p50:.1f} ms  p95 {p95:.1f} ms"
                  f"  misses: {len(misses)}")
        best_single = max(r[1] for r in rows[:2])
        print(f"hybrid recall@{K} minus the better single mode: {rows[2][1] - best_single:+.3f}")
        print()
        print(f"| mode | recall@{K} | MRR@{K} | p50 ms | p95 ms |")
        print("|---|---|---|---|---|")
        for mode, recall, mrr, p50, p95 in rows:
            print(f"| {mode} | {recall:.3f} | {mrr:.3f} | {p50:.1f} | {p95:.1f} |")
    finally:
        if args.keep or args.reuse:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()

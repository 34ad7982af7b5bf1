"""Retrieval quality of dense, sparse (SPLADE) and hybrid (RRF) search, before and after issue 8's chunker.

Two corpora nobody wrote for this project, with labelled queries (bench/retrieval_sets.py):

* stdlib docs: the docstrings of the running interpreter's standard-library modules (top-level
  `*.py`), one Markdown document per module (`<module>.md`: the module docstring, then a section
  per public class and function);
* click and rich source: the `.py` files of those installed packages, as they are.

Each reported set is its first needs and those added later (written before any run on them); the
table scores the whole set, and a second table each part alone.

Each corpus is synced twice into a temporary embedded Chroma: with the old character chunker
(bench/legacy_chunker.py: 900/100/300 characters, no header) and with today's
(headwater/pipeline/chunk.py). A query is found at rank r when the r-th distinct document among the hits
is one of its answers. Reported per mode: hit@3, hit@10 and MRR@10, and the MRR@10 change with a
95 % paired-bootstrap interval over the queries (a change whose interval spans 0 is within what
the choice of queries can move).

`--modes` (issue 39) syncs each corpus once, with today's chunker, and compares the search modes
instead: dense, sparse and hybrid in chunk results (`group_by="chunk"`: chunks fused by RRF, read
as the distinct documents among them) and in document results (`group_by="document"`, the
default: documents fused by their rank on each side), each mode's MRR@10 change from dense with
its 95 % paired-bootstrap interval. With `--dev --fusion-grid`, the grid also fuses documents
("document ..." settings: each side's candidates collapsed to their documents first).

A fourth reported corpus, `postgres`, is prose: PostgreSQL 15's HTML manual, its server
administration and data definition chapters (POSTGRES_DOCS_PAGES). Get it with
`apt-get install postgresql-doc-15` (Debian 12); the bench reads it from POSTGRES_DOCS_DIR.

Run: `python -m bench.retrieval [--corpus docs|click|rich|postgres|starlette|jinja2|httpx|all] [--dev] [--modes] [--keep]`. `--dev`
runs the dev sets instead (stdlib docs and click needs of their own, and starlette's, jinja2's and
httpx's source, corpora that are never reported): tune on those, never on the reported sets. `--dev --per-query`
prints each dev query's rank per mode, before and after.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import random
import shutil
import sysconfig
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import Any

from bench import retrieval_sets

K = 10
MODES = ("dense", "sparse", "hybrid")
DEPTH = 5 * K  # the first window of hits (chunks); deeper where it holds fewer than K documents (ranked_documents)
BOOTSTRAP_ROUNDS = 10_000
BOOTSTRAP_SEED = 8  # fixed, so that a rerun on the same ranks prints the same interval
FUSION_GRID_K = (5, 20, 60)
FUSION_GRID_DENSE_WEIGHTS = (1.0, 1.5, 2.0, 3.0, 5.0)
FUSION_GRID_DENSE_SHARES = (0.5, 0.6, 0.7, 0.8, 0.9)
FEEDBACK_GRID = ((3, 0.5), (3, 1.0), (5, 0.5), (5, 1.0), (10, 1.0))  # (dense chunks fed back, their weight)
POSTGRES_DOCS_DIR = Path("/usr/share/doc/postgresql-doc-15/html")  # apt-get install postgresql-doc-15
# The prose chapters: server administration (configuration, authentication, backup, replication,
# monitoring, maintenance, WAL), data definition, indexes, concurrency and full text search.
POSTGRES_DOCS_PAGES = (
    "runtime-config", "auth-", "client-authentication", "backup", "continuous-archiving", "wal-", "routine-",
    "maintenance", "monitoring", "high-availability", "hot-standby", "warm-standby", "logical-replication",
    "locale", "charset", "collation", "upgrading", "kernel-resources", "server-start", "ssl-tcp",
    "encryption-options", "ddl-", "mvcc", "performance-tips", "populate", "indexes-", "textsearch-")


def build_stdlib_docs(target: Path, needed: set[str]) -> int:
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
    # Packages (urllib, collections, ...) are documented from their __init__ for the dev set.
    for package in sorted(needed - {p.stem for p in target.glob("*.md")}):
        init = stdlib / package / "__init__.py"
        if init.is_file() and (doc := ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))):
            (target / f"{package}.md").write_text(f"# {package}\n\n{doc}\n", encoding="utf-8")
            written += 1
    missing = sorted(m for m in needed if not (target / f"{m}.md").exists())
    if missing:
        raise SystemExit(f"the labelled set needs modules this Python lacks: {', '.join(missing)}")
    return written


def build_postgres_docs(target: Path) -> int:
    """The PostgreSQL manual's pages in POSTGRES_DOCS_PAGES, as they are installed (HTML)."""
    if not POSTGRES_DOCS_DIR.is_dir():
        raise SystemExit(f"no PostgreSQL manual at {POSTGRES_DOCS_DIR}: apt-get install postgresql-doc-15")
    pages = sorted(p for p in POSTGRES_DOCS_DIR.glob("*.html") if p.name.startswith(POSTGRES_DOCS_PAGES))
    for page in pages:
        shutil.copyfile(page, target / page.name)
    return len(pages)


def package_source(name: str) -> Callable[[Path], int]:
    """A builder that copies an installed package's .py files (its tree) into a corpus folder."""
    def build(target: Path) -> int:
        root = Path(importlib.import_module(name).__file__).parent
        files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
        for source in files:
            destination = target / source.relative_to(root)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, destination)
        return len(files)
    return build


def code_corpus(package: str, needs: dict[str, tuple[str, ...]]) -> tuple[str, Callable[[Path], int], dict[str, set[str]]]:
    """(label, builder, need -> answer files) for an installed package's source as a corpus."""
    return f"{package} source", package_source(package), {need: set(files) for need, files in needs.items()}


@dataclass
class Scores:
    hit3: float
    hit10: float
    mrr: float


def first_relevant_rank(uris: list[str], relevant: set[str]) -> int | None:
    """Rank (from 1) of the first relevant document among the distinct documents in `uris`, within K."""
    seen: list[str] = []
    for uri in uris:
        if uri not in seen:
            seen.append(uri)
        if len(seen) > K:
            break
        if uri in relevant or uri.split("/", 1)[0] in relevant:  # a file, or any file of a listed folder
            return len(seen)
    return None


def reciprocal_ranks(ranks: list[int | None]) -> list[float]:
    """Each query's 1/rank, 0 where it was not found in the top K: the terms of MRR@K."""
    return [1 / r if r else 0.0 for r in ranks]


def score(ranks: list[int | None]) -> Scores:
    found = [r for r in ranks if r is not None]
    return Scores(hit3=sum(r <= 3 for r in found) / len(ranks), hit10=len(found) / len(ranks),
                  mrr=sum(reciprocal_ranks(ranks)) / len(ranks))


@dataclass
class Change:
    """after - before in MRR@K, with a 95 % paired-bootstrap interval over the queries."""
    mrr: float
    low: float
    high: float

    @property
    def telling(self) -> str:
        if self.low > 0:
            return "better"
        if self.high < 0:
            return "worse"
        return "within noise"


def paired_bootstrap(before: list[int | None], after: list[int | None],
                     rounds: int = BOOTSTRAP_ROUNDS, seed: int = BOOTSTRAP_SEED) -> Change:
    """MRR@K change with a 95 % interval from resampling queries (each query keeps its before/after pair).

    The labelled sets are 30-60 queries, where one query moving a rank shifts MRR by a few
    thousandths: the interval says whether a change is larger than which queries happened to be
    written. Resampling pairs, not the two runs apart, keeps the per-query correlation that makes
    the comparison sharp.
    """
    if len(before) != len(after) or not before:
        raise ValueError("paired bootstrap needs the same non-empty list of queries before and after")
    deltas = [a - b for b, a in zip(reciprocal_ranks(before), reciprocal_ranks(after))]
    n = len(deltas)
    draw = random.Random(seed)
    means = sorted(sum(deltas[draw.randrange(n)] for _ in range(n)) / n for _ in range(rounds))
    return Change(mrr=sum(deltas) / n, low=means[int(0.025 * rounds)], high=means[int(0.975 * rounds) - 1])


@dataclass(frozen=True)
class Row:
    """One corpus and mode of the printed table."""
    label: str
    mode: str
    before: Scores
    after: Scores
    before_chunks: int
    after_chunks: int
    change: Change


def synced_searcher(workdir: Path, corpus: Path, name: str, legacy: bool) -> tuple[Any, int]:
    """Sync `corpus` with one chunker into its own Chroma; returns (a warmed-up Searcher, chunks)."""
    from bench.legacy_chunker import legacy_chunk_document
    from connectors import build_connector
    from headwater.sync.embedded import open_engine
    from headwater.retrieval.searcher import open_searcher
    from headwater.settings import load_settings

    settings = load_settings(chroma_path=workdir / f"chroma-{name}", collection=name)
    started = perf_counter()
    with open_engine(settings) as engine:
        if legacy:
            engine.chunker = legacy_chunk_document
        engine.sync(build_connector("folder", name, path=corpus))
        chunks = engine.store.count()
    print(f"  {name}: {chunks} chunks, synced in {perf_counter() - started:.0f} s", flush=True)
    searcher = open_searcher(settings)
    searcher.search("warm up lazy initialisation", k=DEPTH, group_by="chunk")
    return searcher, chunks


def ranked_documents(searcher: Any, query: str, mode: str, **fusion: float) -> list[str]:
    """The hits' documents, best first, from a window deep enough to hold K distinct documents.

    Hits are chunks, and a long document's chunks can fill a fixed window on their own (50 chunks
    from 3 files were seen on a dev set): a relevant document just below them would count as not
    found in the top K although fewer than K documents ranked above it. So a window that ends
    before K distinct documents is fetched again four times deeper, until it holds K of them or
    the collection has no more chunks. A query whose first window holds K documents is unchanged.
    """
    depth = DEPTH
    while True:
        uris = [h.uri for h in searcher.search(query, k=depth, mode=mode, group_by="chunk", **fusion)]
        if len(set(uris)) >= K or len(uris) < depth:
            return uris
        depth *= 4


def query_ranks(searcher: Any, queries: dict[str, set[str]], mode: str, **fusion: float) -> list[int | None]:
    """Each query's first relevant rank (None: not in the top K), in the order of `queries`."""
    return [first_relevant_rank(ranked_documents(searcher, q, mode, **fusion), relevant)
            for q, relevant in queries.items()]


def evaluate(workdir: Path, corpus: Path, name: str, queries: dict[str, set[str]],
             legacy: bool) -> tuple[dict, dict, int]:
    """Sync `corpus` with one chunker, then rank every query in every mode; returns ({mode: Scores}, {mode: ranks}, chunks)."""
    searcher, chunks = synced_searcher(workdir, corpus, name, legacy)
    ranks = {mode: query_ranks(searcher, queries, mode) for mode in MODES}
    agreeing = dense_agreement(searcher, list(queries))
    print(f"  {name}: Chroma's dense top {DEPTH} is the exact top {DEPTH} for {agreeing} of {len(queries)} queries",
          flush=True)
    return {mode: score(r) for mode, r in ranks.items()}, ranks, chunks


def dense_agreement(searcher: Any, queries: list[str]) -> int:
    """How many queries' dense top DEPTH (Chroma's HNSW) is the exact top DEPTH (every stored vector
    ranked by the collection's distance, ties by id): whether the dense column measures the chunks
    alone or also the approximation of one HNSW graph, which differs from one sync to the next."""
    import numpy as np

    from headwater.store.chroma_store import record_pages
    from headwater.retrieval.filtered_dense import exact_distances

    ids: list[str] = []
    blocks = []
    for page_ids, _, embeddings in record_pages(searcher.store.collection):
        ids.extend(page_ids)
        blocks.append(np.asarray(embeddings, dtype=np.float32))
    vectors, names = np.concatenate(blocks), np.asarray(ids)
    agreeing = 0
    for query in queries:
        distances = exact_distances(searcher.dense.embed([query])[0], vectors, searcher.space)
        exact = names[np.lexsort((names, distances))[:DEPTH]].tolist()
        agreeing += [h.id for h in searcher.search(query, k=DEPTH, mode="dense", group_by="chunk")] == exact
    return agreeing


GROUPINGS = ("chunk", "document")
COMPARED_MODES = MODES + ("auto",)  # auto: the default, hybrid on a collection of mostly code, dense on prose


def compare_modes(workdir: Path, corpus: Path, name: str, queries: dict[str, set[str]]) -> dict[tuple[str, str], list]:
    """Sync once (today's chunker); every query's first relevant rank per (mode, grouping); chunk results
    are read as the distinct documents among the chunks, as the before/after tables read them."""
    searcher, chunks = synced_searcher(workdir, corpus, name, legacy=False)
    ranks: dict[tuple[str, str], list] = {}
    print(f"  {name}: the default mode (auto) is {searcher.default_mode()} here", flush=True)
    for mode in COMPARED_MODES:
        ranks[(mode, "chunk")] = query_ranks(searcher, queries, mode)
        ranks[(mode, "document")] = [
            first_relevant_rank([h.uri for h in searcher.search(q, k=K, mode=mode, group_by="document")], relevant)
            for q, relevant in queries.items()]
    return ranks


def print_mode_table(results: dict[str, dict[tuple[str, str], list]]) -> None:
    """Each corpus, mode and grouping: hit@3, hit@10, MRR@10, and its change from dense (document results) with the interval."""
    print(f"\n| corpus | results | mode | hit@3 | hit@{K} | MRR@{K} | MRR@{K} − dense [95 % paired bootstrap] |")
    print("|---|---|---|---|---|---|---|")
    sums: dict[tuple[str, str], float] = {}
    for label, ranks in results.items():
        dense = ranks[("dense", "document")]
        for grouping in GROUPINGS:
            for mode in COMPARED_MODES:
                mine = ranks[(mode, grouping)]
                scores, change = score(mine), paired_bootstrap(dense, mine)
                sums[(mode, grouping)] = sums.get((mode, grouping), 0.0) + scores.mrr
                print(f"| {label} ({len(mine)} queries) | {grouping} | {mode} | {scores.hit3:.3f} | {scores.hit10:.3f} "
                      f"| {scores.mrr:.3f} | {change.mrr:+.3f} [{change.low:+.3f}, {change.high:+.3f}] {change.telling} |")
    print(f"\nsum of MRR@{K} over the {len(results)} sets: " +
          "; ".join(f"{mode} ({grouping}) {total:.3f}" for (mode, grouping), total in sums.items()))
    for label, ranks in results.items():
        default, dense = score(ranks[("auto", "document")]).mrr, score(ranks[("dense", "document")]).mrr
        print(f"{label}: the default (auto, document results) MRR@{K} {default:.3f} is "
              f"{'at least' if default >= dense else 'BELOW'} dense's {dense:.3f}")


def module_answers(needs: dict[str, str | tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """need -> the stdlib modules that answer it, whether a set names one module or several."""
    return {need: (modules,) if isinstance(modules, str) else modules for need, modules in needs.items()}


def merged(parts: tuple[dict, ...]) -> dict:
    """One set of needs from its parts, in order."""
    return {need: answers for part in parts for need, answers in part.items()}


def scored_parts(label: str, queries: list[str], parts: tuple[dict, ...], before: dict, after: dict) -> list[str]:
    """Table rows for each part of a set alone: its queries' ranks picked out of the whole set's."""
    lines = []
    for number, part in enumerate(parts, start=1):
        picked = [n for n, query in enumerate(queries) if query in part]
        for mode in MODES:
            b, a = ([ranks[mode][n] for n in picked] for ranks in (before, after))
            change = paired_bootstrap(b, a)
            lines.append(f"| {label} | part {number}: {len(picked)} | {mode} | {score(b).mrr:.3f} → {score(a).mrr:.3f} "
                         f"| {change.mrr:+.3f} [{change.low:+.3f}, {change.high:+.3f}] {change.telling} |")
    return lines


def print_query_ranks(queries: dict[str, set[str]], before: dict, after: dict) -> None:
    """Dev sets only: every query's rank per mode, before -> after (where a chunking change wins or loses)."""
    shown = lambda rank: str(rank) if rank else "-"  # noqa: E731
    for n, query in enumerate(queries):
        moves = "  ".join(f"{mode} {shown(before[mode][n]):>2} -> {shown(after[mode][n]):<2}" for mode in MODES)
        print(f"    {moves}  {query}")


def fusion_grid(workdir: Path, corpus: Path, name: str, queries: dict[str, set[str]]) -> dict[str, float]:
    """Dev sets only: hybrid MRR per fusion setting next to each single mode (for tuning); returns them by name.

    Each side's top candidates (as many as a hybrid search of the bench's first window fuses) are
    fetched once per query, and every setting ranks those same candidates (bench/fusion_methods.py).
    The RRF grid also runs with sparse sides of their own: SPLADE searching with dense's best chunks
    fed back into the query (feedback_sides).
    """
    from bench import fusion_methods
    from headwater.retrieval.searcher import hybrid_candidates

    candidates = hybrid_candidates(DEPTH)  # what a hybrid search for the first window fuses per side
    searcher, _ = synced_searcher(workdir, corpus, name, legacy=False)
    sides: list[dict[str, list]] = []  # per query: each side's scored candidates, by side name
    uri_of: dict[str, str] = {}
    for query in queries:
        pair = {}
        for mode in ("dense", "sparse"):
            hits = searcher.search(query, k=candidates, mode=mode, group_by="chunk")
            uri_of.update((h.id, h.uri) for h in hits)
            pair[mode] = [(h.id, h.score) for h in hits]
        for side, hits in feedback_sides(searcher, query, pair["dense"], candidates).items():
            uri_of.update((i, searcher.index.uris[searcher.index.row_of[i]]) for i, _ in hits)
            pair[side] = hits
        sides.append(pair)
    settings: dict[str, Callable[[dict], list[str]]] = {
        side: (lambda p, side=side: [i for i, _ in p[side]]) for side in sides[0]}
    for side in (s for s in sides[0] if s != "dense"):
        for rrf_k in FUSION_GRID_K:
            for weight in FUSION_GRID_DENSE_WEIGHTS:
                setting = f"rrf k={rrf_k} dense weight {weight:g}" + ("" if side == "sparse" else f" with {side}")
                settings[setting] = lambda p, k=rrf_k, w=weight, side=side: fusion_methods.rrf(p["dense"], p[side], k, w)
    for label, normalise in (("min-max", fusion_methods.min_max), ("z-score", fusion_methods.z_scores)):
        for share in FUSION_GRID_DENSE_SHARES:
            settings[f"convex {label} dense share {share:g}"] = (
                lambda p, a=share, f=normalise: fusion_methods.convex(p["dense"], p["sparse"], a, f))
    # Document fusion: each side's candidates collapsed to documents (named by their best chunk) first.
    for rrf_k in FUSION_GRID_K:
        for weight in FUSION_GRID_DENSE_WEIGHTS:
            settings[f"document rrf k={rrf_k} dense weight {weight:g}"] = (
                lambda p, k=rrf_k, w=weight: fusion_methods.rrf(*fusion_methods.per_document(p, uri_of), k, w))
    for share in FUSION_GRID_DENSE_SHARES:
        settings[f"document convex min-max dense share {share:g}"] = (
            lambda p, a=share: fusion_methods.convex(*fusion_methods.per_document(p, uri_of), a, fusion_methods.min_max))
    uri_of.update({uri: uri for uri in set(uri_of.values())})  # document settings rank documents, named by uri
    found = {}
    for setting, fuse in settings.items():
        ranks = [first_relevant_rank([uri_of[i] for i in fuse(pair)], relevant)
                 for pair, relevant in zip(sides, queries.values())]
        found[setting] = score(ranks).mrr
        print(f"  {setting}: MRR@{K} {found[setting]:.3f}")
    return found


def feedback_sides(searcher: Any, query: str, dense: list[tuple[str, float]], n: int) -> dict[str, list]:
    """Dev grid only: sparse candidates for the query with dense's best chunks fed back, per FEEDBACK_GRID setting."""
    from bench import fusion_methods
    from headwater.store import chroma_store as keys
    from headwater.store.sparse_codec import decode_sparse

    question = searcher.sparse.encode([query])[0]
    deepest = [i for i, _ in dense[:max(chunks for chunks, _ in FEEDBACK_GRID)]]
    found = searcher.store.collection.get(ids=deepest, include=["metadatas"])
    stored = {i: decode_sparse(m[keys.SPARSE]) for i, m in zip(found["ids"], found["metadatas"])}
    sides = {}
    for chunks, weight in FEEDBACK_GRID:
        fed = fusion_methods.feedback_query(question, [stored[i] for i in deepest[:chunks]], weight)
        sides[f"feedback {chunks} x {weight:g}"] = searcher.index.search(*fed, n)
    return sides


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=("docs", "click", "rich", "postgres", "starlette", "jinja2", "httpx", "all"),
                        default="all")
    parser.add_argument("--modes", action="store_true",
                        help="compare the modes in chunk and document results (today's chunker only, one sync per corpus)")
    parser.add_argument("--dev", action="store_true", help="the small dev sets (for tuning) instead")
    parser.add_argument("--keep", action="store_true", help="keep the temporary corpora and Chromas")
    parser.add_argument("--fusion-grid", action="store_true",
                        help="with --dev: hybrid MRR for RRF and score-fusion settings (today's chunker only)")
    parser.add_argument("--per-query", action="store_true",
                        help="with --dev: print every query's rank per mode, before and after")
    args = parser.parse_args()
    if args.per_query and not args.dev:
        parser.error("--per-query is for looking at queries, so it runs on the dev sets only (add --dev)")
    if args.fusion_grid and not args.dev:
        parser.error("--fusion-grid tunes, so it runs on the dev sets only (add --dev)")

    # A reported set is its first needs and the needs added later; each part is also scored alone.
    sets = retrieval_sets
    if args.dev:
        parts = {"docs": (sets.STDLIB_DOCS_DEV,), "click": (sets.CLICK_SOURCE_DEV,)}
    else:
        parts = {"docs": (sets.STDLIB_DOCS, sets.STDLIB_DOCS_ADDED),
                 "click": (sets.CLICK_SOURCE, sets.CLICK_SOURCE_ADDED),
                 "rich": (sets.RICH_SOURCE, sets.RICH_SOURCE_ADDED)}  # rich has no dev set: never tuned on
    doc_needs = module_answers(merged(parts["docs"]))
    documented = {module for modules in doc_needs.values() for module in modules}
    docs = {need: {f"{module}.md" for module in modules} for need, modules in doc_needs.items()}
    corpora = {
        "docs": ("stdlib docs", lambda d: build_stdlib_docs(d, documented), docs),
        "click": code_corpus("click", merged(parts["click"])),
    }
    if args.dev:  # starlette, jinja2 and httpx are dev corpora only: they are tuned on, so they are never reported
        corpora["starlette"] = code_corpus("starlette", sets.STARLETTE_SOURCE_DEV)
        corpora["jinja2"] = code_corpus("jinja2", sets.JINJA2_SOURCE_DEV)
        corpora["httpx"] = code_corpus("httpx", sets.HTTPX_SOURCE_DEV)
    else:
        corpora["rich"] = code_corpus("rich", merged(parts["rich"]))
        corpora["postgres"] = ("postgres docs", build_postgres_docs,
                               {need: set(pages) for need, pages in sets.POSTGRES_DOCS.items()})
    if args.corpus != "all" and args.corpus not in corpora:
        parser.error(f"{args.corpus} is a {'reported' if args.dev else 'dev'} corpus only "
                     f"({'drop' if args.dev else 'add'} --dev)")
    workdir = Path(tempfile.mkdtemp(prefix="headwater-retrieval-"))
    rows = []
    part_rows: list[str] = []
    hybrid_margins: dict[str, dict[str, Change]] = {}  # corpus -> single mode -> hybrid minus it, after
    grids: list[dict[str, float]] = []
    compared: dict[str, dict[tuple[str, str], list]] = {}
    try:
        for key in (list(corpora) if args.corpus == "all" else [args.corpus]):
            label, build, queries = corpora[key]
            corpus = workdir / f"corpus-{key}"
            corpus.mkdir()
            documents = build(corpus)
            print(f"{label}: {documents} documents, {len(queries)} labelled queries{' (dev set)' if args.dev else ''}")
            if args.fusion_grid:
                grids.append(fusion_grid(workdir, corpus, f"{key}-grid", queries))
                continue
            if args.modes:
                compared[label] = compare_modes(workdir, corpus, f"{key}-modes", queries)
                continue
            before, before_ranks, before_chunks = evaluate(workdir, corpus, f"{key}-before", queries, legacy=True)
            after, after_ranks, after_chunks = evaluate(workdir, corpus, f"{key}-after", queries, legacy=False)
            if args.per_query:
                print_query_ranks(queries, before_ranks, after_ranks)
            for mode in MODES:
                rows.append(Row(label, mode, before[mode], after[mode], before_chunks, after_chunks,
                                paired_bootstrap(before_ranks[mode], after_ranks[mode])))
            hybrid_margins[label] = {mode: paired_bootstrap(after_ranks[mode], after_ranks["hybrid"])
                                     for mode in ("dense", "sparse")}
            if len(parts.get(key, ())) > 1:
                part_rows.extend(scored_parts(label, list(queries), parts[key], before_ranks, after_ranks))
        if compared:
            print_mode_table(compared)
            return
        if grids:
            print(f"\nmean MRR@{K} over the {len(grids)} dev corpora, best first:")
            means = {setting: sum(g[setting] for g in grids) / len(grids) for setting in grids[0]}
            for setting, mean in sorted(means.items(), key=lambda item: -item[1]):
                print(f"  {mean:.3f}  {setting}")
            return
        print()
        print(f"| corpus | mode | hit@3 before → after | hit@{K} before → after | MRR@{K} before → after "
              f"| MRR@{K} change [95 % paired bootstrap] |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            b, a, c = r.before, r.after, r.change
            print(f"| {r.label} ({r.before_chunks} → {r.after_chunks} chunks) | {r.mode} | "
                  f"{b.hit3:.3f} → {a.hit3:.3f} | {b.hit10:.3f} → {a.hit10:.3f} | {b.mrr:.3f} → {a.mrr:.3f} "
                  f"| {c.mrr:+.3f} [{c.low:+.3f}, {c.high:+.3f}] {c.telling} |")
        if part_rows:
            print(f"\neach part of a reported set alone (the first needs, then those added later):\n"
                  f"| corpus | queries | mode | MRR@{K} before → after | MRR@{K} change [95 % paired bootstrap] |\n"
                  f"|---|---|---|---|---|")
            print("\n".join(part_rows))
        print()
        for label in dict.fromkeys(r.label for r in rows):
            mine = {r.mode: (r.before, r.after) for r in rows if r.label == label}
            better = all(a.mrr > b.mrr and a.hit10 >= b.hit10 for b, a in mine.values())
            hybrid_best = mine["hybrid"][1].mrr > max(mine["dense"][1].mrr, mine["sparse"][1].mrr)
            margins = "; ".join(f"hybrid - {mode} {c.mrr:+.3f} [{c.low:+.3f}, {c.high:+.3f}] {c.telling}"
                                for mode, c in hybrid_margins[label].items())
            print(f"{label}: after beats before on MRR@{K} in every mode (hit@{K} not lower): {better}; "
                  f"hybrid MRR@{K} above both single modes: {hybrid_best} ({margins})")
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()

"""How the derived sparse index and hybrid search scale: 200,000 chunks indexed, 100,000 searched.

Headwater keeps its own inverted index over the SPLADE vectors stored in Chroma metadata
(``headwater.sparse_index``), so its size, build time, load time and query latency are ours to
answer for. Embedding 200,000 real chunks would take about 11 hours on a small machine, so the
vectors are synthesised from real ones instead:

* Pool: about 400 paragraphs cut from the docstrings of the running interpreter's standard
  library (``sysconfig.get_paths()["stdlib"]``, top-level ``*.py`` in name order, at most a few
  paragraphs per module, read with ``ast.get_docstring``), each encoded once with SPLADE-tiny
  (``SpladeEncoder``).
* Chunk n: a pool vector chosen by a seeded RNG, keeping a random 70-100 % of its terms and
  adding 0-10 random vocabulary terms with small weights, then encoded with ``encode_sparse``
  exactly as the sync writes it. So term statistics (how many terms per chunk, which terms are
  common, the weight distribution) are SPLADE's, while no two chunks are identical.
  The dense side is Chroma's HNSW, not ours: its vectors are random 384-d unit vectors.
* Queries: about 50 short natural-language questions about standard-library topics, encoded
  with the same models at query time, reused round-robin.

Measured:

1. Index at ``--index-chunks`` (200,000): built through the write path
   (``SparseIndex.upsert`` in batches of 4,000 with the metadata a sync writes), then sealed;
   its ``nbytes()``, process RSS growth, size on disk after ``persist()``, the ``persist()`` and
   ``SparseIndex.load()`` times, and ``search(k=50)`` latency over 200 real query vectors.
2. Hybrid search at ``--hybrid-chunks`` (100,000), end to end: an embedded Chroma collection
   loaded through ``ChromaStore.upsert``, the index rebuilt from the collection alone
   (``open_sparse_index``), then ``Searcher.search`` in each mode and with filters, plus the
   query-encoding time alone (which every mode pays).

Run: ``python -m bench.sparse_index_scale [--index-chunks N] [--hybrid-chunks N] [--keep]``.
"""

from __future__ import annotations

import argparse
import ast
import gc
import os
import random
import resource
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path
from time import perf_counter, process_time

import numpy as np

SEED = 20240611
POOL_SIZE = 400
PER_MODULE = 4  # paragraphs per module: keeps the pool from being a handful of verbose modules
INDEX_BATCH = 4000  # the sync's default upsert batch
SOURCES = 5
DIMENSIONS = 384
SPARSE_QUERIES = 200
SEARCH_K = 50  # what Searcher asks of each side in hybrid mode (MIN_CANDIDATES)

QUERIES = [
    "how do I parse command line arguments",
    "read a csv file into rows",
    "compress data with gzip",
    "match text with a regular expression",
    "format dates and times as strings",
    "serialize python objects to json",
    "run a subprocess and capture its output",
    "create a temporary directory",
    "walk a directory tree and list files",
    "thread pool for concurrent tasks",
    "asynchronous event loop and coroutines",
    "compute a sha256 hash of bytes",
    "send an email over smtp",
    "parse a url into its components",
    "make an http request to a server",
    "decimal arithmetic with exact rounding",
    "random numbers with a seed",
    "sort a list with a key function",
    "heap queue priority queue",
    "binary search in a sorted list",
    "named tuples and data classes",
    "copy objects deeply",
    "log messages to a file with levels",
    "unit tests and assertions",
    "mock objects in tests",
    "read configuration from an ini file",
    "encode and decode base64",
    "socket server listening on a port",
    "pickle protocol and unpickling security",
    "weak references and garbage collection",
    "abstract base classes and interfaces",
    "context managers and the with statement",
    "iterate over combinations and permutations",
    "cache function results with lru_cache",
    "inspect the signature of a function",
    "profile code to find slow functions",
    "trace memory allocations",
    "zip archives: read and write",
    "tar files with compression",
    "shared memory between processes",
    "locks and semaphores for synchronization",
    "string formatting with templates",
    "unicode normalization of strings",
    "locale aware number formatting",
    "calendar of a month",
    "fractions and rational numbers",
    "statistics mean median and variance",
    "typing generics and type hints",
    "import a module by name at runtime",
    "signal handlers for interrupts",
]


# Inputs -----------------------------------------------------------------------------------------

def docstring_paragraphs(limit: int) -> list[str]:
    """Paragraphs of stdlib docstrings, deterministic: files in name order, nodes in ast.walk order."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    seen: set[str] = set()
    pool: list[str] = []
    for path in sorted(stdlib.glob("*.py"), key=lambda p: p.name):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        taken = 0
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            doc = ast.get_docstring(node)
            if not doc:
                continue
            for block in doc.split("\n\n"):
                text = " ".join(block.split())
                # Short fragments ("Args:", signatures) are not what a chunk looks like.
                if len(text) < 120 or len(text.split()) < 18 or text in seen:
                    continue
                seen.add(text)
                pool.append(text[:1200])
                taken += 1
                if taken >= PER_MODULE or len(pool) >= limit:
                    break
            if taken >= PER_MODULE or len(pool) >= limit:
                break
        if len(pool) >= limit:
            break
    return pool


class Synthesiser:
    """Chunk n's sparse vector, pool row and dense vector, the same whichever phase asks."""

    def __init__(self, pool_vectors: list[tuple[np.ndarray, np.ndarray]], vocabulary: int) -> None:
        self.pool = pool_vectors
        self.vocabulary = vocabulary

    def batch(self, start: int, count: int) -> tuple[list[int], list[str]]:
        """(pool row, encoded sparse vector) for chunks start..start+count."""
        from headwater.sparse_codec import encode_sparse

        # One generator per batch start: phases with the same batch size see the same chunks.
        rng = np.random.default_rng([SEED, start])
        rows = rng.integers(0, len(self.pool), size=count)
        encoded = []
        for row in rows.tolist():
            indices, values = self.pool[row]
            keep = max(1, int(round(rng.uniform(0.7, 1.0) * len(indices))))
            chosen = np.sort(rng.choice(len(indices), size=keep, replace=False))
            extra = np.setdiff1d(rng.integers(0, self.vocabulary, size=int(rng.integers(0, 11))), indices)
            encoded.append(encode_sparse(np.concatenate([indices[chosen], extra]),
                                         np.concatenate([values[chosen],
                                                         rng.uniform(0.02, 0.3, size=extra.size).astype(np.float32)])))
        return rows.tolist(), encoded

    @staticmethod
    def dense(start: int, count: int) -> np.ndarray:
        rng = np.random.default_rng([SEED, start, 1])
        vectors = rng.standard_normal((count, DIMENSIONS), dtype=np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def chunk_metadata(n: int, encoded: str) -> dict:
    return {"source_id": f"s{n % SOURCES}", "uri": f"dir{n % 50}/doc{n // 20}.md", "sparse_vector": encoded}


# Measuring ----------------------------------------------------------------------------------------

def rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3  # KiB on Linux


def dir_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def pct(samples: list[float]) -> tuple[float, float]:
    """p50 and p95 in milliseconds."""
    a = np.asarray(samples) * 1e3
    return float(np.percentile(a, 50)), float(np.percentile(a, 95))


def fmt(samples: list[float]) -> str:
    p50, p95 = pct(samples)
    return f"p50 {p50:7.1f} ms   p95 {p95:7.1f} ms   (n={len(samples)})"


# Phases -------------------------------------------------------------------------------------------

def index_phase(synth: Synthesiser, queries: list[tuple[np.ndarray, np.ndarray]], chunks: int,
                directory: Path) -> dict:
    from headwater.sparse_index import SparseIndex

    gc.collect()
    rss0, peak0 = rss_mb(), peak_rss_mb()
    index = SparseIndex(directory)  # a directory, so persist() has somewhere to write
    upsert_s = synth_s = 0.0
    nnz = 0
    for start in range(0, chunks, INDEX_BATCH):
        count = min(INDEX_BATCH, chunks - start)
        t0 = perf_counter()
        _, encoded = synth.batch(start, count)
        metadatas = [chunk_metadata(start + i, e) for i, e in enumerate(encoded)]
        ids = [f"r{start + i}" for i in range(count)]
        t1 = perf_counter()
        index.upsert(ids, metadatas)
        upsert_s += perf_counter() - t1
        synth_s += t1 - t0
        del metadatas, encoded, ids
    gc.collect()
    rss_pending = rss_mb()
    nbytes_pending = index.nbytes()
    # upsert() only queues rows; the first search or persist() seals them into a CSR segment.
    # Sealing here puts that cost in the build figure instead of the first query's latency.
    t0 = perf_counter()
    index._seal()
    seal_s = perf_counter() - t0
    gc.collect()
    rss_sealed, peak_sealed = rss_mb(), peak_rss_mb()
    nnz = sum(s.matrix.nnz for s in index._segments)
    nbytes = index.nbytes()

    t0 = perf_counter()
    index.persist()
    persist_s = perf_counter() - t0
    disk = dir_mb(directory)
    breakdown = {}
    for segment_file in sorted(directory.glob("segment-*.npz")):
        with np.load(segment_file) as data:
            for name in data.files:
                breakdown[name] = breakdown.get(name, 0) + data[name].nbytes

    t0 = perf_counter()
    loaded = SparseIndex.load(directory)
    load_s = perf_counter() - t0
    assert loaded is not None and len(loaded) == chunks, "persisted index did not load back whole"

    latencies: list[float] = []
    hit_counts: list[int] = []
    mismatches = 0
    for n in range(SPARSE_QUERIES):
        indices, values = queries[n % len(queries)]
        t0 = perf_counter()
        hits = index.search(indices, values, k=SEARCH_K)
        latencies.append(perf_counter() - t0)
        hit_counts.append(len(hits))
        if n < len(queries) and [h[0] for h in loaded.search(indices, values, k=SEARCH_K)] != [h[0] for h in hits]:
            mismatches += 1
    loaded_latencies = []
    for n in range(len(queries)):
        indices, values = queries[n]
        t0 = perf_counter()
        loaded.search(indices, values, k=SEARCH_K)
        loaded_latencies.append(perf_counter() - t0)
    return {
        "chunks": chunks, "synth_s": synth_s, "upsert_s": upsert_s, "seal_s": seal_s,
        "build_s": upsert_s + seal_s, "nnz": nnz, "nbytes_mb": nbytes / 1e6, "nbytes_pending_mb": nbytes_pending / 1e6,
        "rss_pending_mb": rss_pending - rss0, "rss_mb": rss_sealed - rss0, "peak_before_mb": peak0,
        "peak_after_mb": peak_sealed, "disk_mb": disk, "breakdown": breakdown, "persist_s": persist_s,
        "load_s": load_s, "search": latencies, "loaded_search": loaded_latencies, "hits_min": min(hit_counts),
        "mismatches": mismatches,
    }


def hybrid_phase(synth: Synthesiser, pool_texts: list[str], query_texts: list[str], chunks: int,
                 tmp: Path, sparse) -> dict:
    from headwater.chroma_store import ChromaStore, location_metadata
    from headwater.embedded import open_sparse_index
    from headwater.retrieval import Filters, Searcher
    from headwater.settings import load_settings
    from workers.embed_dense import DenseEmbedder

    settings = load_settings(chroma_path=tmp / "chroma", collection="scale")
    store = ChromaStore.from_settings(settings, dense_model="all-MiniLM-L6-v2", sparse_model="splade:splade-tiny")
    batch = store.batch_limit
    load_s = 0.0
    for start in range(0, chunks, batch):
        count = min(batch, chunks - start)
        rows, encoded = synth.batch(start, count)
        # location_metadata adds uri_dirs as the sync does; Chroma needs it for the uri-prefix filter.
        metadatas = [location_metadata(chunk_metadata(start + i, e), f"dir{(start + i) % 50}/doc{(start + i) // 20}.md")
                     for i, e in enumerate(encoded)]
        ids = [f"r{start + i}" for i in range(count)]
        texts = [pool_texts[r] for r in rows]
        embeddings = synth.dense(start, count)
        t0 = perf_counter()
        store.upsert(ids, texts, embeddings, metadatas)
        load_s += perf_counter() - t0
    stored = store.count()
    assert stored == chunks, f"collection holds {stored}, expected {chunks}"

    t0 = perf_counter()
    index = open_sparse_index(store, tmp / "idx", save=True)
    rebuild_s = perf_counter() - t0
    assert len(index) == chunks

    # The query side as open_searcher configures it: one thread per model, both sides in parallel.
    import torch

    torch.set_num_threads(1)
    dense = DenseEmbedder(threads=1)
    searcher = Searcher(store, dense, sparse, index, tmp / "idx")
    for q in query_texts[:3]:
        searcher.search(q, k=10, mode="hybrid")

    cases = [("hybrid", "hybrid", None), ("dense", "dense", None), ("sparse", "sparse", None),
             ("hybrid source_id=s1", "hybrid", Filters(source_id="s1")),
             ("hybrid uri_prefix=dir7", "hybrid", Filters(uri_prefix="dir7"))]
    runs: dict[str, list[float]] = {label: [] for label, _, _ in cases}
    fewest = {label: 10 for label, _, _ in cases}
    encode, dense_encode, sparse_encode = [], [], []
    # Interleaved (every mode for one query, then the next query) rather than mode after mode:
    # on a shared machine a burst of someone else's load then lands on all modes alike.
    for _ in range(2):
        for q in query_texts:
            t0 = perf_counter()
            dense.embed([q])
            t1 = perf_counter()
            sparse.encode([q])
            t2 = perf_counter()
            dense_encode.append(t1 - t0)
            sparse_encode.append(t2 - t1)
            encode.append(t2 - t0)
            for label, mode, filters in cases:
                t0 = perf_counter()
                hits = searcher.search(q, k=10, mode=mode, filters=filters)
                runs[label].append(perf_counter() - t0)
                fewest[label] = min(fewest[label], len(hits))
                if filters is not None:
                    assert all(filters.matches_location(h.metadata["source_id"], h.uri) for h in hits), \
                        f"{label}: a hit outside the filter"
    return {"chunks": chunks, "batch": batch, "load_s": load_s, "rebuild_s": rebuild_s, "encode": encode,
            "dense_encode": dense_encode, "sparse_encode": sparse_encode, "runs": runs, "fewest": fewest,
            "chroma_mb": dir_mb(tmp / "chroma")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index-chunks", type=int, default=200_000, help="chunks in the index-only phase")
    parser.add_argument("--hybrid-chunks", type=int, default=100_000, help="chunks in the Chroma + Searcher phase")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directories and print where")
    args = parser.parse_args(argv)

    import torch

    from workers.embed_sparse import SpladeEncoder

    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    tmp = Path(tempfile.mkdtemp(prefix="headwater-scale-"))
    started = perf_counter()
    try:
        # The machine may be shared with other runs: load average and CPU seconds show how much.
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}, "
              f"load average {os.getloadavg()[0]:.2f} at start")
        t0 = perf_counter()
        sparse = SpladeEncoder()
        vocabulary = sparse.vocabulary_size
        print(f"SPLADE model load: {perf_counter() - t0:.2f} s  (vocabulary {vocabulary})")

        pool_texts = docstring_paragraphs(POOL_SIZE)
        c0, t0 = process_time(), perf_counter()
        pool_vectors = sparse.encode(pool_texts)
        pool_s = perf_counter() - t0
        terms = np.array([len(i) for i, _ in pool_vectors])
        print(f"pool: {len(pool_texts)} stdlib docstring paragraphs, mean {np.mean([len(t) for t in pool_texts]):.0f} "
              f"chars; SPLADE-encoded in {pool_s:.1f} s (CPU {process_time() - c0:.1f} s); terms per vector "
              f"mean {terms.mean():.0f}, median {np.median(terms):.0f}, max {terms.max()}")
        query_vectors = sparse.encode(QUERIES)
        qterms = np.array([len(i) for i, _ in query_vectors])
        print(f"queries: {len(QUERIES)} strings; terms per query vector mean {qterms.mean():.0f}, max {qterms.max()}")
        synth = Synthesiser(pool_vectors, vocabulary)

        print(f"\n== 1. Sparse index alone, {args.index_chunks:,} chunks (write path, batches of {INDEX_BATCH:,})")
        c0 = process_time()
        ix = index_phase(synth, query_vectors, args.index_chunks, tmp / "index-only")
        print(f"  synthesising vectors:   {ix['synth_s']:.1f} s (not included below)")
        print(f"  build:                  {ix['build_s']:.2f} s  (upsert {ix['upsert_s']:.2f} s + seal {ix['seal_s']:.2f} s; "
              f"{ix['chunks'] / ix['build_s']:,.0f} chunks/s; process CPU for the phase {process_time() - c0:.1f} s)")
        print(f"  postings:               {ix['nnz']:,} non-zeros ({ix['nnz'] / ix['chunks']:.1f} per chunk)")
        print(f"  index.nbytes():         {ix['nbytes_mb']:.1f} MB sealed  "
              f"(reported {ix['nbytes_pending_mb']:.1f} MB before sealing: pending rows are not counted)")
        print(f"  RSS growth:             {ix['rss_mb']:.1f} MB sealed, {ix['rss_pending_mb']:.1f} MB with rows pending; "
              f"peak RSS {ix['peak_before_mb']:.0f} -> {ix['peak_after_mb']:.0f} MB")
        print(f"  persist():              {ix['persist_s']:.2f} s")
        print(f"  on disk:                {ix['disk_mb']:.1f} MB  (segment arrays: " + ", ".join(
            f"{k} {v / 1e6:.1f}" for k, v in ix["breakdown"].items()) + " MB)")
        print(f"  SparseIndex.load():     {ix['load_s']:.2f} s")
        print(f"  search(k={SEARCH_K}):          {fmt(ix['search'])}  ({SPARSE_QUERIES} searches, {len(QUERIES)} real query vectors round-robin); "
              f"fewest hits {ix['hits_min']}")
        print(f"  search on loaded index: {fmt(ix['loaded_search'])}; top-{SEARCH_K} differs from the built index "
              f"for {ix['mismatches']} of {len(QUERIES)} queries")
        gc.collect()  # the phase-1 indexes are gone; their memory should not count against phase 2

        print(f"\n== 2. Hybrid search through Searcher, {args.hybrid_chunks:,} chunks (embedded Chroma)")
        c0 = process_time()
        hy = hybrid_phase(synth, pool_texts, QUERIES, args.hybrid_chunks, tmp / "hybrid", sparse)
        print(f"  Chroma load:            {hy['load_s']:.1f} s  ({hy['chunks'] / hy['load_s']:,.0f} records/s, "
              f"batches of {hy['batch']:,}); Chroma directory {hy['chroma_mb']:.0f} MB")
        print(f"  index rebuild from collection (open_sparse_index, save=True): {hy['rebuild_s']:.2f} s")
        print(f"  query encoding alone:   dense+sparse {fmt(hy['encode'])}")
        print(f"                          dense  {fmt(hy['dense_encode'])}")
        print(f"                          sparse {fmt(hy['sparse_encode'])}")
        for label, samples in hy["runs"].items():
            print(f"  search {label:<24} {fmt(samples)}; fewest hits {hy['fewest'][label]} of 10")
        print(f"  process CPU for the phase: {process_time() - c0:.1f} s")

        print(f"\nload average {os.getloadavg()[0]:.2f} at end; total {perf_counter() - started:.0f} s")
        s50, s95 = pct(ix["search"])
        h50, h95 = pct(hy["runs"]["hybrid"])
        d50, _ = pct(hy["runs"]["dense"])
        p50, _ = pct(hy["runs"]["sparse"])
        print()
        print(f"| chunks (index) | index build s | index MB | load s | sparse search p50/p95 ms | "
              f"hybrid p50/p95 ms ({hy['chunks']:,}) | dense p50 ms | sparse p50 ms |")
        print("|---|---|---|---|---|---|---|---|")
        print(f"| {ix['chunks']:,} | {ix['build_s']:.1f} | {ix['nbytes_mb']:.0f} | {ix['load_s']:.2f} | "
              f"{s50:.1f} / {s95:.1f} | {h50:.1f} / {h95:.1f} | {d50:.1f} | {p50:.1f} |")
        if args.keep:
            print(f"\nkept {tmp}")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

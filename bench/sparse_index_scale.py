"""How the derived sparse index and hybrid search scale: 200,000 chunks indexed, 100,000 searched.

Headwater keeps its own inverted index over the SPLADE vectors stored in Chroma metadata
(``headwater.retrieval.sparse_index``), so its size, build time, load time and query latency are ours to
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
import sys
import sysconfig
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
        from headwater.store.sparse_codec import encode_sparse

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
    from headwater.retrieval.sparse_index import SparseIndex

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


def chunk_uri(n: int) -> str:
    return f"dir{n % 50}/doc{n // 20}.md"


def load_collection(store, synth: Synthesiser, pool_texts: list[str], chunks: int) -> float:
    """Write chunks 0..chunks through ChromaStore.upsert as a sync would; returns the seconds it took."""
    from headwater.store.chroma_store import location_metadata

    load_s = 0.0
    for start in range(0, chunks, store.batch_limit):
        count = min(store.batch_limit, chunks - start)
        rows, encoded = synth.batch(start, count)
        # location_metadata adds uri_dirs as the sync does; Chroma needs it for the uri-prefix filter.
        metadatas = [location_metadata(chunk_metadata(start + i, e), chunk_uri(start + i)) for i, e in enumerate(encoded)]
        ids = [f"r{start + i}" for i in range(count)]
        texts = [pool_texts[r] for r in rows]
        embeddings = synth.dense(start, count)
        t0 = perf_counter()
        store.upsert(ids, texts, embeddings, metadatas)
        load_s += perf_counter() - t0
    stored = store.count()
    assert stored == chunks, f"collection holds {stored}, expected {chunks}"
    return load_s


def dense_agreement(store, index, synth: Synthesiser, dense, query_texts: list[str], filters, n: int) -> dict:
    """Headwater's filtered dense candidates against Chroma's own filtered query and exact search."""
    from headwater.retrieval.filtered_dense import collection_search_ef, filtered_dense_search

    chunks = len(index)
    vectors = np.concatenate([synth.dense(start, min(store.batch_limit, chunks - start))
                              for start in range(0, chunks, store.batch_limit)])
    inside = np.flatnonzero(index.location_rows(*filters.location_key()))
    inside_ids = np.array([int(index.ids[r][1:]) for r in inside])
    same = overlap = ours_recall = chroma_recall = 0.0
    for text in query_texts:
        query = dense.embed([text])[0]
        exact = {f"r{i}" for i in inside_ids[np.argsort(-(vectors[inside_ids] @ query))[:n]]}
        ours = [i for i, _ in filtered_dense_search(store.collection, query.tolist(), n, filters.location_where(),
                                                    index, index.location_rows(*filters.location_key()),
                                                    filters.matches_location, "cosine",
                                                    collection_search_ef(store.collection))]
        chroma = store.collection.query(query_embeddings=[query.tolist()], n_results=n, where=filters.chroma_where(),
                                        include=[])["ids"][0]
        same += ours == chroma
        overlap += len(set(ours) & set(chroma)) / max(len(chroma), 1)
        ours_recall += len(set(ours) & exact) / max(len(exact), 1)
        chroma_recall += len(set(chroma) & exact) / max(len(exact), 1)
    count = len(query_texts)
    return {"same": same / count, "overlap": overlap / count, "ours_recall": ours_recall / count,
            "chroma_recall": chroma_recall / count, "matching": len(inside)}


def dense_plans(store, index, dense, query_texts: list[str], filtered) -> dict:
    """The filtered dense side alone (n=SEARCH_K), each plan forced in turn: where the scan stops paying."""
    from headwater.retrieval import filtered_dense as fd

    forced = {"scan": (10**9, 0, 0), "over-fetch": (0, 10**9, 0), "restricted": (0, 0, 0)}
    saved = (fd.SCAN_LIMIT, fd.MAX_OVERFETCH, fd.EXACT_LIMIT)
    vectors = [dense.embed([q])[0].tolist() for q in query_texts[:20]]
    space, ef = fd.collection_space(store.collection), fd.collection_search_ef(store.collection)
    out: dict[str, dict[str, list[float]]] = {}
    try:
        for label, filters in filtered:
            rows = index.location_rows(*filters.location_key())
            matching = int(rows.sum())
            for plan, limits in forced.items():
                fd.SCAN_LIMIT, fd.MAX_OVERFETCH, fd.EXACT_LIMIT = saved
                if plan == "over-fetch" and fd.overfetch_size(SEARCH_K, matching, len(index), ef) is None:
                    continue  # the filter is too selective for over-fetching to find its matches
                fd.SCAN_LIMIT, fd.MAX_OVERFETCH, fd.EXACT_LIMIT = limits
                if plan != "scan":  # as an index without vectors: no scan to fall back to
                    index.dense_blocks = lambda rows: None
                else:
                    index.__dict__.pop("dense_blocks", None)
                times = out.setdefault(f"{label.split()[1]} ({matching:,} rows)", {}).setdefault(plan, [])
                for vector in vectors:
                    t0 = perf_counter()
                    fd.filtered_dense_search(store.collection, vector, SEARCH_K, filters.location_where(), index, rows,
                                             filters.matches_location, space, ef)
                    times.append(perf_counter() - t0)
    finally:
        fd.SCAN_LIMIT, fd.MAX_OVERFETCH, fd.EXACT_LIMIT = saved
        index.__dict__.pop("dense_blocks", None)
    return out


def hybrid_phase(synth: Synthesiser, pool_texts: list[str], query_texts: list[str], chunks: int,
                 tmp: Path, sparse) -> dict:
    from headwater.pipeline.stores import open_store
    from headwater.sync.embedded import open_sparse_index
    from headwater.retrieval.searcher import Filters, Searcher
    from headwater.retrieval.sparse_index import SparseIndex
    from headwater.settings import load_settings
    from headwater.pipeline.embed_dense import DenseEmbedder

    settings = load_settings(chroma_path=tmp / "chroma", collection="scale")
    store = open_store(settings, dense_model="all-MiniLM-L6-v2", sparse_model="splade:splade-tiny")
    batch = store.batch_limit
    load_s = load_collection(store, synth, pool_texts, chunks)

    t0 = perf_counter()
    index = open_sparse_index(store, tmp / "idx", save=True)
    rebuild_s = perf_counter() - t0
    assert len(index) == chunks
    dense_copy_mb = index.dense_nbytes() / 1e6  # the rows' dense vectors, kept for filtered scans
    index_disk_mb = dir_mb(tmp / "idx")
    t0 = perf_counter()
    reloaded = SparseIndex.load(tmp / "idx")  # a restart: mapped, not rebuilt
    reload_s = perf_counter() - t0
    assert reloaded is not None and len(reloaded) == chunks
    del reloaded

    # The query side as open_searcher configures it: one thread per model, both sides in parallel.
    import torch

    torch.set_num_threads(1)
    dense = DenseEmbedder(threads=1)
    searcher = Searcher(store, dense, sparse, index, tmp / "idx")
    for q in query_texts[:3]:
        searcher.search(q, k=10, mode="hybrid")

    # Filters matching 20 % (a source), 2 % (a directory) and one chunk (a document).
    filtered = [("hybrid source_id=s1", Filters(source_id="s1")), ("hybrid uri_prefix=dir7", Filters(uri_prefix="dir7")),
                ("hybrid uri_prefix=<1 doc>", Filters(uri_prefix=chunk_uri(chunks // 2)))]
    cases = [("hybrid", "hybrid", None), ("dense", "dense", None), ("sparse", "sparse", None),
             *((label, "hybrid", filters) for label, filters in filtered)]
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
    # Chroma's own filtered query, for comparison: same vectors, `where` evaluated by Chroma.
    for label, filters in filtered:
        runs[f"dense, Chroma where ({label.split()[1]})"] = chroma_where = []
        for q in query_texts:
            vector = dense.embed([q])[0].tolist()
            t0 = perf_counter()
            store.collection.query(query_embeddings=[vector], n_results=SEARCH_K, where=filters.chroma_where(),
                                   include=["distances"])
            chroma_where.append(perf_counter() - t0)
    agreement = {label: dense_agreement(store, index, synth, dense, query_texts, filters, SEARCH_K)
                 for label, filters in filtered}
    plans = dense_plans(store, index, dense, query_texts, filtered)
    return {"chunks": chunks, "batch": batch, "load_s": load_s, "rebuild_s": rebuild_s, "encode": encode,
            "dense_copy_mb": dense_copy_mb, "index_disk_mb": index_disk_mb, "reload_s": reload_s, "plans": plans,
            "dense_encode": dense_encode, "sparse_encode": sparse_encode, "runs": runs, "fewest": fewest,
            "chroma_mb": dir_mb(tmp / "chroma"), "agreement": agreement}


NEW_CHUNK = "The quokka zeppelin {n} negotiates marmalade handshakes with a tangerine lighthouse"


def server_phase(synth: Synthesiser, pool_texts: list[str], chunks: int, tmp: Path, sparse, new_chunks: int = 5) -> dict:
    """A long-lived searching process against `chroma run` + the Redis write log (bench.server_follower)."""
    import json
    import subprocess

    import redis

    from headwater.store.chroma_store import location_metadata
    from headwater.pipeline.stores import open_store
    from headwater.settings import load_settings
    from headwater.store.sparse_codec import encode_sparse
    from headwater.retrieval.write_log import WriteLog
    from tests.services import chroma_server, redis_server

    tmp.mkdir(parents=True, exist_ok=True)
    with redis_server(tmp) as url, chroma_server(tmp) as (host, port):
        env = {**os.environ, "HEADWATER_CHROMA_HOST": host, "HEADWATER_CHROMA_PORT": str(port), "HEADWATER_REDIS_URL": url,
               "HEADWATER_COLLECTION": "scale", "HEADWATER_SPARSE_INDEX_DIR": str(tmp / "followers"),
               "HEADWATER_MODEL_THREADS": "1"}
        settings = load_settings(chroma_host=host, chroma_port=port, collection="scale")
        store = open_store(settings, dense_model="all-MiniLM-L6-v2", sparse_model="splade:splade-tiny")
        store.observers.append(WriteLog(redis.Redis.from_url(url), "scale"))
        load_s = load_collection(store, synth, pool_texts, chunks)
        written = [chunks]

        def write_new() -> tuple[str, str]:
            n = written[0]
            written[0] += 1
            text = NEW_CHUNK.format(n=n)
            indices, values = sparse.encode([text])[0]
            metadata = location_metadata(chunk_metadata(n, encode_sparse(indices, values)), chunk_uri(n))
            store.upsert([f"r{n}"], [text], synth.dense(n, 1), [metadata])
            return f"r{n}", text

        def follower() -> tuple[subprocess.Popen, dict, float]:
            t0 = perf_counter()
            process = subprocess.Popen([sys.executable, "-m", "bench.server_follower"], env=env, text=True,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            ready = json.loads(process.stdout.readline())
            return process, ready, perf_counter() - t0

        def find_new(process: subprocess.Popen) -> float:
            import time

            record_id, text = write_new()
            process.stdin.write(json.dumps({"id": record_id, "text": text, "written": time.time()}) + "\n")
            process.stdin.flush()
            found = json.loads(process.stdout.readline())["found_after_s"]
            assert found is not None, "a new chunk was not found within 60 s"
            return found

        first, first_ready, first_wall = follower()
        found = [find_new(first) for _ in range(new_chunks)]
        first.stdin.close()
        first.wait(timeout=60)
        for _ in range(1000 // store.batch_limit + 1):  # written while no searcher runs: replayed at start
            write_new()
        second, second_ready, second_wall = follower()
        found += [find_new(second) for _ in range(new_chunks)]
        second.stdin.close()
        second.wait(timeout=60)
    return {"chunks": chunks, "load_s": load_s, "first": first_ready, "first_wall": first_wall,
            "second": second_ready, "second_wall": second_wall, "found": found}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index-chunks", type=int, default=200_000, help="chunks in the index-only phase")
    parser.add_argument("--hybrid-chunks", type=int, default=100_000, help="chunks in the Chroma + Searcher phase")
    parser.add_argument("--server-chunks", type=int, default=100_000,
                        help="chunks in the Chroma-server phase (0 skips it)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directories and print where")
    args = parser.parse_args(argv)

    import torch

    from bench.scratch import scratch_directory
    from headwater.pipeline.embed_sparse import SpladeEncoder

    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    started = perf_counter()
    with scratch_directory("headwater-scale-", args.keep) as tmp:
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

        print(f"\n== 2. Hybrid search through Searcher, {args.hybrid_chunks:,} chunks (embedded Chroma); "
              f"load average {os.getloadavg()[0]:.2f}")
        c0 = process_time()
        hy = hybrid_phase(synth, pool_texts, QUERIES, args.hybrid_chunks, tmp / "hybrid", sparse)
        print(f"  Chroma load:            {hy['load_s']:.1f} s  ({hy['chunks'] / hy['load_s']:,.0f} records/s, "
              f"batches of {hy['batch']:,}); Chroma directory {hy['chroma_mb']:.0f} MB")
        print(f"  index rebuild from collection (open_sparse_index, save=True): {hy['rebuild_s']:.2f} s; "
              f"on disk {hy['index_disk_mb']:.0f} MB, of which the dense vectors kept for filtered scans "
              f"{hy['dense_copy_mb']:.0f} MB ({hy['dense_copy_mb'] * 1e5 / hy['chunks']:.0f} MB per 100,000 chunks, "
              f"mapped: resident only as scans read them); SparseIndex.load() {hy['reload_s']:.2f} s")
        print(f"  query encoding alone:   dense+sparse {fmt(hy['encode'])}")
        print(f"                          dense  {fmt(hy['dense_encode'])}")
        print(f"                          sparse {fmt(hy['sparse_encode'])}")
        for label, samples in hy["runs"].items():
            fewest = f"; fewest hits {hy['fewest'][label]} of 10" if label in hy["fewest"] else ""
            print(f"  search {label:<32} {fmt(samples)}{fewest}")
        for label, a in hy["agreement"].items():
            print(f"  dense candidates (n={SEARCH_K}) {label[7:]:<20} ({a['matching']:,} chunks match): same list as "
                  f"Chroma's where query for {a['same']:.0%} of queries, overlap {a['overlap']:.3f}; recall vs exact: "
                  f"Headwater {a['ours_recall']:.3f}, Chroma where {a['chroma_recall']:.3f}")
        for label, plans in hy["plans"].items():
            print(f"  dense side alone, n={SEARCH_K}, {label}: " + "; ".join(
                f"{plan} p50 {pct(samples)[0]:.1f} ms" for plan, samples in plans.items()))
        print(f"  process CPU for the phase: {process_time() - c0:.1f} s")

        sv = None
        if args.server_chunks:
            print(f"\n== 3. Server mode, {args.server_chunks:,} chunks: a long-lived searching process "
                  f"(chroma run + Redis write log); load average {os.getloadavg()[0]:.2f}")
            sv = server_phase(synth, pool_texts, args.server_chunks, tmp / "server", sparse)
            print(f"  load through the server:  {sv['load_s']:.1f} s ({sv['chunks'] / sv['load_s']:,.0f} records/s)")
            for label, ready, wall in (("first start (no index)", sv["first"], sv["first_wall"]),
                                       ("restart (index on disk)", sv["second"], sv["second_wall"])):
                print(f"  {label:<24} open_searcher {ready['open_s']:.2f} s, rebuilt: {ready['rebuilt']}, "
                      f"{ready['chunks']:,} chunks; process start to ready {wall:.1f} s (imports and model load included)")
            print("  new chunk found by sparse search after: " + ", ".join(f"{f:.2f}" for f in sv["found"]) + " s")

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
        print()
        print(f"| {hy['chunks']:,} chunks, `Searcher.search(k=10)` | p50 ms | p95 ms | p50 / unfiltered hybrid p50 |")
        print("|---|---|---|---|")
        for label, samples in hy["runs"].items():
            f50, f95 = pct(samples)
            print(f"| {label} | {f50:.1f} | {f95:.1f} | {f50 / h50:.2f} |")
        if sv is not None:
            print()
            print(f"| server mode, {sv['chunks']:,} chunks | |")
            print("|---|---|")
            print(f"| first start: open_searcher (rebuilds) | {sv['first']['open_s']:.2f} s |")
            print(f"| restart with the index on disk: open_searcher | {sv['second']['open_s']:.2f} s "
                  f"(rebuilt: {sv['second']['rebuilt']}) |")
            print(f"| new chunk found by sparse search, max of {len(sv['found'])} | {max(sv['found']):.2f} s |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

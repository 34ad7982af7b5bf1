"""Dense recall@10 against exact search, and query latency, for a few HNSW settings at 100,000 chunks.

A collection's HNSW settings (headwater.settings.HnswConfig: M, construction ef, search ef) trade
recall for latency and build time. Random vectors make every setting look bad (their nearest
neighbours are barely nearer than anything else), so the vectors have the structure of real
text embeddings:

* Bases: up to ``--bases`` (3,000) paragraphs of the running interpreter's standard-library
  docstrings (every ``*.py`` under ``sysconfig.get_paths()["stdlib"]`` outside test packages, in
  path order, paragraphs of at least 100 characters), embedded with all-MiniLM-L6-v2, the model
  Headwater syncs with.
* Chunk n: base b = n mod bases, moved a random 0-40 % of the way towards another random base
  and perturbed with Gaussian noise (sigma 0.02 per dimension, about 0.4 in norm), then
  normalised. So chunks crowd around real embeddings and fill the space between related and
  unrelated texts, as a corpus's chunks do, without embedding 100,000 texts (hours here).
* Queries: the 50 questions of ``bench.sparse_index_scale.QUERIES`` and 150 held-out docstring
  paragraphs (not bases), embedded with the same model.
* Truth: the exact top 10 by cosine similarity (numpy over all vectors).

For each (M, construction ef) a fresh embedded collection is built (build time measured), then
each search ef is set with ``collection.modify`` and every query is run once to warm and once
measured (``query(n_results=10)``, one at a time, p50/p95). Recall@10 is the share of the exact
top 10 that HNSW returns, averaged over the queries.

Run: ``python -m bench.hnsw_settings [--chunks N] [--bases N] [--keep]``.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
import sysconfig
from pathlib import Path
from time import perf_counter

import numpy as np

SEED = 20261201
HELD_OUT = 150
K = 10
# (M, construction ef) builds, and the search efs measured on each.
BUILDS = [(8, 50), (16, 100), (32, 200)]
SEARCH_EFS = [10, 20, 50, 100, 200]


def stdlib_paragraphs(limit: int) -> list[str]:
    """Docstring paragraphs of the standard library, in path order (deterministic)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    seen: set[str] = set()
    out: list[str] = []
    for path in sorted(stdlib.rglob("*.py")):
        if any(part in ("test", "tests", "idle_test", "site-packages") for part in path.relative_to(stdlib).parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for block in (ast.get_docstring(node) or "").split("\n\n"):
                text = " ".join(block.split())
                if len(text) >= 100 and text not in seen:
                    seen.add(text)
                    out.append(text[:1000])
                    if len(out) >= limit:
                        return out
    return out


def synthesise(bases: np.ndarray, chunks: int) -> np.ndarray:
    rng = np.random.default_rng(SEED)
    own = np.arange(chunks) % len(bases)
    other = rng.integers(0, len(bases), size=chunks)
    towards = rng.uniform(0.0, 0.4, size=(chunks, 1)).astype(np.float32)
    vectors = bases[own] + towards * (bases[other] - bases[own])
    vectors += rng.normal(0.0, 0.02, size=vectors.shape).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def exact_top(vectors: np.ndarray, queries: np.ndarray, k: int) -> list[set[int]]:
    similarities = queries @ vectors.T
    top = np.argpartition(-similarities, k, axis=1)[:, :k]
    return [set(row.tolist()) for row in top]


def build(path: Path, vectors: np.ndarray, m: int, construction_ef: int) -> tuple[object, float]:
    from headwater.pipeline.stores import open_store
    from headwater.settings import HnswConfig, load_settings

    settings = load_settings(chroma_path=path, collection="hnsw-bench")
    store = open_store(settings, hnsw=HnswConfig(m=m, construction_ef=construction_ef))
    started = perf_counter()
    for start in range(0, len(vectors), store.batch_limit):
        end = min(start + store.batch_limit, len(vectors))
        store.collection.add(ids=[f"c{n}" for n in range(start, end)], embeddings=vectors[start:end])
    return store.collection, perf_counter() - started


def with_search_ef(collection, path: Path, search_ef: int):
    """The collection reopened with another search ef: Chroma reads it when it loads the index, so a
    change reaches processes (here: clients) that open the collection afterwards."""
    import chromadb
    from chromadb.api.client import SharedSystemClient

    collection.modify(configuration={"hnsw": {"ef_search": search_ef}})
    SharedSystemClient.clear_system_cache()
    return chromadb.PersistentClient(path=str(path)).get_collection(collection.name, embedding_function=None)


def measure(collection, queries: np.ndarray, truth: list[set[int]]) -> tuple[float, float, float]:
    latencies, recalls = [], []
    for warm in (True, False):
        for query, expected in zip(queries, truth):
            started = perf_counter()
            found = collection.query(query_embeddings=[query.tolist()], n_results=K, include=[])["ids"][0]
            if not warm:
                latencies.append(perf_counter() - started)
                recalls.append(len({int(i[1:]) for i in found} & expected) / K)
    p50, p95 = np.percentile(np.asarray(latencies) * 1e3, [50, 95])
    return float(np.mean(recalls)), float(p50), float(p95)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--bases", type=int, default=3_000)
    parser.add_argument("--keep", action="store_true", help="keep the collections and print where")
    args = parser.parse_args(argv)

    from bench.scratch import scratch_directory
    from bench.sparse_index_scale import QUERIES
    from headwater.pipeline.embed_dense import DenseEmbedder

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
    texts = stdlib_paragraphs(args.bases + HELD_OUT)
    dense = DenseEmbedder()
    started = perf_counter()
    embedded = np.asarray(dense.embed(texts + QUERIES), dtype=np.float32)
    bases, held_out, questions = embedded[:args.bases], embedded[args.bases:len(texts)], embedded[len(texts):]
    print(f"{len(bases):,} base paragraphs + {len(held_out)} held-out + {len(questions)} questions embedded "
          f"in {perf_counter() - started:.0f} s")
    vectors = synthesise(bases, args.chunks)
    queries = np.concatenate([questions, held_out])
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    truth = exact_top(vectors, queries, K)
    tenth = np.sort(queries @ vectors.T, axis=1)[:, -K]
    print(f"{len(vectors):,} chunks, {len(queries)} queries; cosine of the 10th exact neighbour: "
          f"median {np.median(tenth):.3f}")

    rows = []
    with scratch_directory("headwater-hnsw-", args.keep) as tmp:
        for m, construction_ef in BUILDS:
            path = tmp / f"m{m}-ef{construction_ef}"
            collection, build_s = build(path, vectors, m, construction_ef)
            print(f"built M={m} construction_ef={construction_ef}: {build_s:.0f} s "
                  f"({len(vectors) / build_s:,.0f} vectors/s); load average {os.getloadavg()[0]:.2f}")
            for search_ef in SEARCH_EFS:
                collection = with_search_ef(collection, path, search_ef)
                recall, p50, p95 = measure(collection, queries, truth)
                rows.append((m, construction_ef, search_ef, recall, p50, p95, build_s))
                print(f"  search_ef={search_ef:<4} recall@10 {recall:.3f}   p50 {p50:.2f} ms   p95 {p95:.2f} ms")
        print(f"\nload average {os.getloadavg()[0]:.2f} at end\n")
        print("| M | construction ef | search ef | recall@10 | p50 ms | p95 ms | build s |")
        print("|---|---|---|---|---|---|---|")
        for m, construction_ef, search_ef, recall, p50, p95, build_s in rows:
            print(f"| {m} | {construction_ef} | {search_ef} | {recall:.3f} | {p50:.2f} | {p95:.2f} | {build_s:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

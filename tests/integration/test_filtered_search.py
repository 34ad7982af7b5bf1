"""Filtered dense search through the derived index returns what Chroma's own filtered query returns."""

from __future__ import annotations

import numpy as np
import pytest

from headwater.store import chroma_store as keys
from headwater.retrieval import filtered_dense
from headwater.store.chroma_store import ChromaStore, location_metadata
from headwater.pipeline.stores import open_store
from headwater.retrieval.filtered_dense import exact_distances, filtered_dense_search
from headwater.retrieval.searcher import Filters
from headwater.settings import HnswConfig, Settings
from headwater.store.sparse_codec import encode_sparse
from headwater.retrieval.sparse_index import SparseIndex

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

RECORDS = 3_000
DIMENSIONS = 32
N = 20


def _placement(n: int) -> tuple[str, str]:
    """Sources of very different sizes (80 %, 15 %, 4.9 %, one record) and nested directories."""
    source = "one" if n == 1234 else ("small" if n % 20 == 3 else ("mid" if n % 20 in (5, 6, 7) else "big"))
    return source, f"d{n % 7}/e{n % 3}/doc{n}.md"


def _write(store: ChromaStore, numbers: range, vectors: np.ndarray) -> None:
    ids, metadatas = [], []
    for n in numbers:
        source, uri = _placement(n)
        ids.append(f"r{n}")
        sparse = encode_sparse(np.array([n % 50 + 1]), np.array([1.0]))
        metadatas.append(location_metadata({keys.SOURCE_ID: source, keys.SPARSE: sparse}, uri))
    store.upsert(ids, [f"text {i}" for i in ids], vectors[numbers.start:numbers.stop].tolist(), metadatas)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    rng = np.random.default_rng(11)
    centres = rng.standard_normal((30, DIMENSIONS))
    vectors = (centres[rng.integers(0, 30, RECORDS + 200)] + 0.5 * rng.standard_normal((RECORDS + 200, DIMENSIONS)))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    queries = centres[rng.integers(0, 30, 12)] + 0.5 * rng.standard_normal((12, DIMENSIONS))
    # A search ef far above the collection's need makes HNSW exact here, so both sides can be held to
    # the exact answer rather than to one approximation each.
    settings = Settings(chroma_path=tmp_path_factory.mktemp("filtered") / "chroma", collection="filtered")
    store = open_store(settings, hnsw=HnswConfig(search_ef=2_000))
    _write(store, range(RECORDS), vectors)
    index = SparseIndex.rebuild(store.collection)
    return store, index, vectors, queries


FILTERS = [Filters(source_id="big"), Filters(source_id="mid"), Filters(source_id="small"), Filters(source_id="one"),
           Filters(source_id="nobody"), Filters(uri_prefix="d3"), Filters(uri_prefix="d3/e1"),
           Filters(uri_prefix="d2/e0/doc1234.md"), Filters(uri_prefix="d3/e"), Filters(source_id="mid", uri_prefix="d4")]
# Each plan forced in turn (scan limit, over-fetch limit, exact limit), then the chosen one.
PLANS = {"scan": (10**9, 0, 0), "over-fetch first": (0, 10**9, 0), "restricted": (0, 0, 0),
         "exact": (0, 0, 10**9), "chosen": (None, None, None)}


@pytest.mark.parametrize("plan", PLANS)
def test_every_plan_returns_chromas_filtered_results(world, plan, monkeypatch):
    store, index, vectors, queries = world
    scan, overfetch, exact = PLANS[plan]
    if overfetch is not None:
        monkeypatch.setattr(filtered_dense, "SCAN_LIMIT", scan)
        if not scan:  # as an index holding no vectors would: the plans that ask Chroma
            monkeypatch.setattr(index, "dense_blocks", lambda rows: None)
        monkeypatch.setattr(filtered_dense, "MAX_OVERFETCH", overfetch)
        monkeypatch.setattr(filtered_dense, "EXACT_LIMIT", exact)
    for filters in FILTERS:
        rows = index.location_rows(*filters.location_key())
        matching = int(rows.sum())
        for query in queries:
            ours = filtered_dense_search(store.collection, query.tolist(), N, filters.location_where(), index, rows,
                                         filters.matches_location)
            chroma = store.collection.query(query_embeddings=[query.tolist()], n_results=N,
                                            where=filters.chroma_where(), include=["distances"])
            assert [i for i, _ in ours] == chroma["ids"][0], (plan, filters)
            assert [s for _, s in ours] == pytest.approx([1 - d for d in chroma["distances"][0]], abs=1e-5)
            assert len(ours) == min(N, matching), "a selective filter still returns what it can"


def test_records_the_index_has_not_seen_are_checked_against_the_collection(world, tmp_path, monkeypatch):
    store, index, vectors, queries = world
    # The over-fetch plan meets records by Chroma's ranking; the scan (like the restricted and exact
    # plans) ranks only the rows the index holds, as current as its last refresh.
    monkeypatch.setattr(filtered_dense, "SCAN_LIMIT", 0)
    stale = SparseIndex.rebuild(store.collection)
    monkeypatch.setattr(stale, "dense_blocks", lambda rows: None)
    _write(store, range(RECORDS, RECORDS + 200), vectors)  # written after the index was read
    try:
        filters = Filters(source_id="big")
        rows = stale.location_rows(*filters.location_key())
        for query in queries:
            ours = filtered_dense_search(store.collection, query.tolist(), N, filters.location_where(), stale, rows,
                                         filters.matches_location)
            chroma = store.collection.query(query_embeddings=[query.tolist()], n_results=N,
                                            where=filters.chroma_where(), include=[])
            assert [i for i, _ in ours] == chroma["ids"][0]
    finally:
        store.delete([f"r{n}" for n in range(RECORDS, RECORDS + 200)])


@pytest.mark.parametrize("space", ["cosine", "l2", "ip"])
def test_exact_distances_are_chromas(tmp_path, space):
    rng = np.random.default_rng(12)
    vectors = rng.standard_normal((50, 8)).astype(np.float32)
    store = open_store(Settings(chroma_path=tmp_path / "chroma", collection=f"space-{space}"),
                                      hnsw=HnswConfig(space=space, search_ef=500))
    store.collection.add(ids=[f"v{n}" for n in range(50)], embeddings=vectors.tolist())
    query = rng.standard_normal(8).astype(np.float32)
    chroma = store.collection.query(query_embeddings=[query.tolist()], n_results=50, include=["distances"])
    ours = exact_distances(query, vectors, space)
    assert [ours[int(i[1:])] for i in chroma["ids"][0]] == pytest.approx(chroma["distances"][0], rel=1e-4, abs=1e-4)


def test_an_unfiltered_dense_query_never_opens_the_sparse_index(world):
    from headwater.lazy import Lazy
    from headwater.retrieval.searcher import Searcher

    store, index, vectors, queries = world

    class FixedVector:  # the query's embedding, without loading a model
        def embed(self, texts):
            return np.asarray([queries[0]], dtype=np.float32)

    lazy = Lazy(lambda: index)
    searcher = Searcher(store, FixedVector(), None, lazy)
    assert len(searcher.search("anything", k=5, mode="dense")) == 5
    assert not lazy.loaded
    hits = searcher.search("anything", k=5, mode="dense", filters=Filters(source_id="small"))
    assert lazy.loaded and len(hits) == 5 and {h.metadata["source_id"] for h in hits} == {"small"}


def test_equally_near_records_rank_by_id_in_every_process(tmp_path):
    # The same chunk text in two sources has one vector: HNSW returns such records in no fixed
    # order, so `headwater serve` and `headwater query` ranked them differently at the cut.
    import subprocess
    import sys

    settings = Settings(chroma_path=tmp_path / "chroma", collection="ties")
    store = open_store(settings)
    rng = np.random.default_rng(5)
    shared = rng.standard_normal(DIMENSIONS).astype(np.float32)
    vectors = np.vstack([np.tile(shared, (12, 1)), rng.standard_normal((40, DIMENSIONS)).astype(np.float32)])
    ids = [f"t{n:02}" for n in rng.permutation(12)] + [f"o{n:02}" for n in range(40)]
    store.upsert(ids, ids, vectors.tolist(), [location_metadata({keys.SOURCE_ID: "s"}, f"{i}.md") for i in ids])
    hits = filtered_dense_search(store.collection, shared.tolist(), 5, None)
    assert [record_id for record_id, _ in hits] == ["t00", "t01", "t02", "t03", "t04"]
    other_process = subprocess.run(
        [sys.executable, "-c", "import sys, json, numpy as np; from headwater.pipeline.stores import open_store; "
         "from headwater.retrieval.filtered_dense import filtered_dense_search; from headwater.settings import Settings; "
         f"s = open_store(Settings(chroma_path={str(tmp_path / 'chroma')!r}, collection='ties'), "
         "create=False); print(json.dumps([i for i, _ in filtered_dense_search(s.collection, "
         f"{shared.tolist()!r}, 5, None)]))"], capture_output=True, text=True, timeout=120)
    assert other_process.returncode == 0, other_process.stderr
    assert other_process.stdout.strip() == '["t00", "t01", "t02", "t03", "t04"]'


def _exact_nearest(collection, query: np.ndarray, n: int, where: dict, space: str) -> list[tuple[str, float]]:
    """The exact reference: a brute-force scan of the stored embeddings in the collection's space.

    Chroma's own query is HNSW, which may miss a neighbour (it missed the 20th under "ip" once);
    ties rank by id, as filtered_dense does.
    """
    stored = collection.get(where=where, include=["embeddings"])
    matrix = np.asarray(stored["embeddings"], dtype=np.float64)
    q = query.astype(np.float64)
    if space == "l2":
        scores = -((matrix - q) ** 2).sum(axis=1)  # Chroma's l2 is the squared distance
    elif space == "ip":
        scores = matrix @ q
    else:
        scores = (matrix @ q) / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(q))
    ranked = sorted(zip(stored["ids"], scores.tolist()), key=lambda hit: (-hit[1], hit[0]))
    return ranked[:n]


@pytest.mark.parametrize("space", ["cosine", "l2", "ip"])
def test_the_scan_ranks_by_the_collections_space(tmp_path, space, monkeypatch):
    monkeypatch.setattr(filtered_dense, "SCAN_LIMIT", 10**9)
    rng = np.random.default_rng(14)
    vectors = (rng.standard_normal((600, 8)) * rng.uniform(0.2, 3.0, (600, 1))).astype(np.float32)  # unnormalised
    settings = Settings(chroma_path=tmp_path / "chroma", collection=f"scan-{space}")
    store = open_store(settings, hnsw=HnswConfig(space=space, search_ef=2_000))
    _write(store, range(600), vectors)
    index = SparseIndex.rebuild(store.collection)
    filters = Filters(source_id="mid")
    rows = index.location_rows(*filters.location_key())
    for query in rng.standard_normal((6, 8)).astype(np.float32):
        ours = filtered_dense_search(store.collection, query.tolist(), N, filters.location_where(), index, rows,
                                     filters.matches_location, filtered_dense.collection_space(store.collection))
        exact = _exact_nearest(store.collection, query, N, filters.chroma_where(), space)
        assert [i for i, _ in ours] == [i for i, _ in exact]
        assert [s for _, s in ours] == pytest.approx([s for _, s in exact], rel=1e-4, abs=1e-4)

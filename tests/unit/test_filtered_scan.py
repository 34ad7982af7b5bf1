"""The scan plan of filtered dense search: exact top-k over the filter's rows, from the index's vectors."""

from __future__ import annotations

import numpy as np
import pytest

from headwater.retrieval import filtered_dense
from headwater.retrieval.filtered_dense import exact_distances, filtered_dense_search, similarity
from headwater.retrieval.searcher import Filters
from headwater.store.sparse_codec import encode_sparse
from headwater.retrieval.sparse_index import SparseIndex

DIMENSIONS = 24


class NoCollection:
    """The scan never asks Chroma: any call here is a failure."""

    def __getattr__(self, name):
        raise AssertionError(f"the scan plan called collection.{name}")


def _index(rng, count: int, directory=None) -> tuple[SparseIndex, dict[str, np.ndarray], dict[str, str]]:
    vectors = rng.standard_normal((count, DIMENSIONS)).astype(np.float32) * rng.uniform(0.5, 2.0, (count, 1)).astype(np.float32)
    vectors[10:16] = vectors[3]  # equally near records (the same text in several places)
    ids = [f"r{n:04d}" for n in rng.permutation(count)]
    sources = {record_id: "small" if n % 10 == 0 else "big" for n, record_id in enumerate(ids)}
    index = SparseIndex(directory)
    metadatas = [{"source_id": sources[i], "uri": f"d{n % 4}/doc{n}.md", "sparse_vector": encode_sparse(np.array([1]), np.array([1.0]))}
                 for n, i in enumerate(ids)]
    for start in range(0, count, 700):  # several segments, merged as a sync's batches would be
        index.upsert(ids[start:start + 700], metadatas[start:start + 700], vectors[start:start + 700])
        index.location_rows(None, None)
    return index, dict(zip(ids, vectors)), sources


def _exact(query, vectors: dict[str, np.ndarray], allowed, n: int, space: str) -> list[tuple[str, float]]:
    ids = sorted(i for i in vectors if allowed(i))
    if not ids:
        return []
    distances = exact_distances(query, np.asarray([vectors[i] for i in ids]), space)
    order = sorted(range(len(ids)), key=lambda k: (distances[k], ids[k]))[:n]
    return [(ids[k], similarity(float(distances[k]), space)) for k in order]


@pytest.mark.parametrize("space", ["cosine", "l2", "ip"])
def test_the_scan_returns_exact_search_over_the_filtered_rows(space):
    rng = np.random.default_rng(31)
    index, vectors, sources = _index(rng, 3000)
    for filters in (Filters(source_id="small"), Filters(source_id="big"), Filters(uri_prefix="d1"),
                    Filters(source_id="small", uri_prefix="d2"), Filters(source_id="nobody")):
        rows = index.location_rows(*filters.location_key())
        uri_of = {index.ids[r]: index.uris[r] for r in np.flatnonzero(rows)}
        for query in [vectors[index.ids[5]] * 1.0, *rng.standard_normal((4, DIMENSIONS)).astype(np.float32)]:
            ours = filtered_dense_search(NoCollection(), query.tolist(), 20, filters.location_where(), index, rows,
                                         filters.matches_location, space)
            expected = _exact(query.astype(np.float32), vectors, lambda i: i in uri_of, 20, space)
            assert [i for i, _ in ours] == [i for i, _ in expected], filters
            assert [s for _, s in ours] == pytest.approx([s for _, s in expected], rel=1e-5, abs=1e-5)


def test_equally_near_rows_rank_by_id_at_the_cut():
    rng = np.random.default_rng(32)
    index, vectors, _ = _index(rng, 500)
    shared = vectors[index.ids[3]]
    twins = sorted(i for i, v in vectors.items() if np.array_equal(v, shared))
    assert len(twins) == 7
    rows = index.location_rows(None, None)
    hits = filtered_dense_search(NoCollection(), shared.tolist(), 4, {"x": 1}, index, rows, lambda s, u: True, "l2")
    assert [i for i, _ in hits] == twins[:4]


def test_deleted_and_overwritten_rows_are_never_returned(tmp_path):
    rng = np.random.default_rng(33)
    index, vectors, sources = _index(rng, 1500, tmp_path / "idx")
    gone = [i for i in list(vectors)[:300]]
    index.delete(gone)
    moved = list(vectors)[300:310]  # overwritten with new vectors
    fresh = rng.standard_normal((len(moved), DIMENSIONS)).astype(np.float32)
    index.upsert(moved, [{"source_id": "big", "uri": "d0/x.md", "sparse_vector": encode_sparse(np.array([1]), np.array([1.0]))}
                         for _ in moved], fresh)
    for i in gone:
        del vectors[i]
    vectors.update(zip(moved, fresh))
    index.persist()
    for current in (index, SparseIndex.load(tmp_path / "idx")):  # and after a restart, without a rebuild
        rows = current.location_rows(None, None)
        for query in rng.standard_normal((3, DIMENSIONS)).astype(np.float32):
            ours = filtered_dense_search(NoCollection(), query.tolist(), 15, {"x": 1}, current, rows, lambda s, u: True,
                                         "cosine")
            expected = _exact(query, vectors, lambda i: True, 15, "cosine")
            assert [i for i, _ in ours] == [i for i, _ in expected]
            assert [s for _, s in ours] == pytest.approx([s for _, s in expected], rel=1e-5, abs=1e-5)


def test_rows_without_vectors_go_to_chroma(monkeypatch):
    rng = np.random.default_rng(34)
    index = SparseIndex()
    sparse = encode_sparse(np.array([1]), np.array([1.0]))
    index.upsert(["a", "b"], [{"source_id": "s", "uri": "a.md", "sparse_vector": sparse}] * 2)  # no vectors given
    others = [f"o{n}" for n in range(2000)]  # too many for the filter's two rows to be over-fetched
    index.upsert(others, [{"source_id": "t", "uri": "o.md", "sparse_vector": sparse}] * len(others))
    rows = index.location_rows("s", None)
    asked = []

    class Collection:
        def get(self, ids, include):
            asked.append(ids)
            return {"ids": ids, "embeddings": rng.standard_normal((len(ids), 4)).tolist()}

    hits = filtered_dense_search(Collection(), [1.0, 0, 0, 0], 2, {"source_id": "s"}, index, rows,
                                 lambda s, u: s == "s", "cosine")
    assert asked == [["a", "b"]] and sorted(i for i, _ in hits) == ["a", "b"]


def test_the_plan_follows_the_matching_row_count(monkeypatch):
    rng = np.random.default_rng(35)
    index, vectors, _ = _index(rng, 400)
    rows = index.location_rows("small", None)
    monkeypatch.setattr(filtered_dense, "SCAN_LIMIT", int(rows.sum()) - 1)  # one row too many to scan first

    class Collection:  # what the restricted plan and the others ask of Chroma
        calls = []

        def get(self, ids, include):
            self.calls.append("get")
            return {"ids": ids, "embeddings": [vectors[i].tolist() for i in ids]}

        def query(self, **kwargs):
            self.calls.append("query")
            return {"ids": [[]], "distances": [[]]}

    collection = Collection()
    filtered_dense_search(collection, vectors[index.ids[0]].tolist(), 5, {"source_id": "small"}, index, rows,
                          lambda s, u: s == "small", "cosine")
    assert collection.calls == ["query"], "over the scan limit, an over-fetching query is tried first"
    monkeypatch.setattr(filtered_dense, "SCAN_LIMIT", int(rows.sum()))
    collection.calls.clear()
    filtered_dense_search(collection, vectors[index.ids[0]].tolist(), 5, {"source_id": "small"}, index, rows,
                          lambda s, u: s == "small", "cosine")
    assert not collection.calls


def test_a_filter_too_selective_to_over_fetch_is_scanned_whatever_its_size(monkeypatch):
    rng = np.random.default_rng(36)
    index, vectors, _ = _index(rng, 3000)
    rows = index.location_rows("small", None)  # 10 %: 300 rows, 100 results needed of 3,000 rows
    monkeypatch.setattr(filtered_dense, "SCAN_LIMIT", 10)
    monkeypatch.setattr(filtered_dense, "MAX_OVERFETCH", 10)  # over-fetching would cost too much
    query = rng.standard_normal(DIMENSIONS).astype(np.float32)
    ours = filtered_dense_search(NoCollection(), query.tolist(), 10, {"source_id": "small"}, index, rows,
                                 lambda s, u: s == "small", "cosine")
    allowed = {index.ids[r] for r in np.flatnonzero(rows)}
    assert [i for i, _ in ours] == [i for i, _ in _exact(query, vectors, allowed.__contains__, 10, "cosine")]

import numpy as np
import pytest

from headwater.store.sparse_codec import encode_sparse
from headwater.retrieval.sparse_index import DIRTY, SparseIndex


def _record(rng, source="s", uri=None):
    terms = rng.choice(2000, size=rng.integers(5, 40), replace=False)
    values = rng.uniform(0.1, 3.0, size=terms.size)
    return {"source_id": source, "uri": uri or f"doc{rng.integers(1000)}.md", "sparse_vector": encode_sparse(terms, values)}


DIMENSIONS = 16


def _vector_of(metadata: dict) -> np.ndarray:
    """A record's dense vector, fixed by its content (an overwrite with new content changes it)."""
    import zlib

    return np.random.default_rng(zlib.crc32(metadata["sparse_vector"].encode())).standard_normal(DIMENSIONS).astype(np.float32)


def _dense_scores(records: dict[str, dict], query_terms, query_values):
    from headwater.store.sparse_codec import decode_sparse

    out = {}
    for record_id, metadata in records.items():
        indices, values = decode_sparse(metadata["sparse_vector"])
        weights = dict(zip(indices.tolist(), values.tolist()))
        out[record_id] = sum(weights.get(t, 0.0) * v for t, v in zip(query_terms, query_values))
    return out


class FakeCollection:
    """Only as much of a collection's get() as rebuild() reads, over a dict."""

    def __init__(self, records):
        self.records = records

    def get(self, include, limit, offset, where=None):
        ids = sorted(self.records)[offset:offset + limit]
        return {"ids": ids, "metadatas": [self.records[i] for i in ids],
                "embeddings": [_vector_of(self.records[i]) for i in ids] if "embeddings" in include else None}


def _apply_history(rng, index, truth, steps=40):
    ids = []
    for step in range(steps):
        batch = {f"r{step}-{n}": _record(rng) for n in range(rng.integers(5, 30))}
        index.upsert(list(batch), list(batch.values()), [_vector_of(m) for m in batch.values()])
        truth.update(batch)
        ids.extend(batch)
        if step % 3 == 0 and ids:  # overwrite some
            again = {i: _record(rng) for i in rng.choice(ids, size=min(5, len(ids)), replace=False).tolist() if i in truth}
            index.upsert(list(again), list(again.values()), [_vector_of(m) for m in again.values()])
            truth.update(again)
        if step % 4 == 1:  # delete some
            gone = [i for i in rng.choice(ids, size=min(8, len(ids)), replace=False).tolist() if i in truth]
            index.delete(gone)
            for i in gone:
                del truth[i]
        index.scores(np.array([1]), np.array([1.0]))  # seal now and then, as queries do


def test_scores_equal_brute_force_after_upserts_overwrites_and_deletes():
    rng = np.random.default_rng(1)
    index, truth = SparseIndex(), {}
    _apply_history(rng, index, truth)
    query_terms, query_values = rng.choice(2000, 25, replace=False), rng.uniform(0.5, 2, 25)
    expected = _dense_scores(truth, query_terms, query_values)
    hits = index.search(query_terms, query_values, k=len(truth))
    assert len(index) == len(truth)
    assert {i for i, _ in hits} <= set(truth)
    for record_id, score in hits:
        assert score == pytest.approx(expected[record_id], rel=1e-4)
    best = sorted((s, i) for i, s in expected.items() if s > 0)[-5:]
    assert [i for i, _ in hits[:5]] == [i for _, i in reversed(best)]


def test_incremental_index_equals_rebuild_and_survives_persistence(tmp_path):
    rng = np.random.default_rng(2)
    index, truth = SparseIndex(tmp_path / "idx"), {}
    _apply_history(rng, index, truth, steps=30)
    index.persist()
    assert not (tmp_path / "idx" / DIRTY).exists()
    loaded = SparseIndex.load(tmp_path / "idx")
    rebuilt = SparseIndex.rebuild(FakeCollection(truth))
    query = (rng.choice(2000, 30, replace=False), rng.uniform(0.5, 2, 30))
    results = [i.search(*query, k=50) for i in (index, loaded, rebuilt)]
    assert results[0] == results[1]
    assert [(i, round(s, 4)) for i, s in results[0]] == [(i, round(s, 4)) for i, s in results[2]]


def test_a_dirty_index_is_not_trusted(tmp_path):
    rng = np.random.default_rng(3)
    index = SparseIndex(tmp_path / "idx")
    index.upsert(["a"], [_record(rng)])
    index.persist()
    assert SparseIndex.load(tmp_path / "idx") is not None
    index.upsert(["b"], [_record(rng)])  # a writer mid-pass (or one that crashed)
    assert (tmp_path / "idx" / DIRTY).exists()
    assert SparseIndex.load(tmp_path / "idx") is None
    assert SparseIndex.saved_generation(tmp_path / "idx") is None


def test_compaction_drops_dead_rows_and_keeps_results():
    rng = np.random.default_rng(4)
    index, truth = SparseIndex(), {}
    _apply_history(rng, index, truth, steps=60)
    assert len(index.ids) == len(index.row_of) or len(index.ids) - len(index.row_of) <= 0.3 * len(index.ids)
    query = (rng.choice(2000, 20, replace=False), rng.uniform(0.5, 2, 20))
    expected = _dense_scores(truth, *query)
    for record_id, score in index.search(*query, k=20):
        assert score == pytest.approx(expected[record_id], rel=1e-4)


def test_accept_filters_are_applied_before_the_cut():
    rng = np.random.default_rng(5)
    index = SparseIndex()
    records = {f"r{n}": _record(rng, source="big" if n % 50 else "small") for n in range(1000)}
    index.upsert(list(records), list(records.values()))
    terms = np.arange(2000)
    values = np.ones(2000)
    hits = index.search(terms, values, k=10, accept=lambda rows: [index.sources[r] == "small" for r in rows])
    assert len(hits) == 10 and all(records[i]["source_id"] == "small" for i, _ in hits)
    assert index.search(terms, values, k=5, accept=lambda rows: [False] * len(rows)) == []


def test_an_overwrite_without_a_vector_removes_the_old_row():
    rng = np.random.default_rng(6)
    index = SparseIndex()
    record = _record(rng)
    index.upsert(["a"], [record])
    index.upsert(["a"], [{"source_id": "s", "uri": "a.md"}])  # no sparse vector this time
    assert len(index) == 0
    assert index.search(np.arange(2000), np.ones(2000), k=5) == []


def test_long_uris_do_not_inflate_the_saved_index(tmp_path):
    rng = np.random.default_rng(7)
    index = SparseIndex(tmp_path / "idx")
    records = {f"r{n}": _record(rng, uri=f"d/{n}.md") for n in range(500)}
    records["long"] = _record(rng, uri="x" * 2000 + ".md")
    index.upsert(list(records), list(records.values()))
    index.persist()
    size = sum(p.stat().st_size for p in (tmp_path / "idx").iterdir())
    assert size < 200_000
    loaded = SparseIndex.load(tmp_path / "idx")
    assert loaded.uris == index.uris and loaded.ids == index.ids


def test_location_rows_follow_upserts_deletes_and_merges():
    rng = np.random.default_rng(8)
    index, truth = SparseIndex(), {}
    placed = lambda n: _record(rng, source=f"s{n % 3}", uri=f"{['ops', 'opsx', 'docs'][n % 3]}/{n}.md")  # noqa: E731
    for step in range(12):
        batch = {f"p{step}-{n}": placed(n) for n in range(rng.integers(50, 400))}
        index.upsert(list(batch), list(batch.values()))
        truth.update(batch)
        for gone in rng.choice(sorted(truth), size=20, replace=False).tolist():
            index.delete([gone])
            del truth[gone]
        for source, prefix in (("s0", None), (None, "ops"), ("s1", "opsx"), ("s2", "ops")):
            rows = index.location_rows(source, prefix)
            expected = {i for i, m in truth.items() if (source is None or m["source_id"] == source)
                        and (prefix is None or m["uri"].startswith(prefix + "/"))}
            assert {index.ids[r] for r in np.flatnonzero(rows)} == expected


def test_a_small_pass_rewrites_only_small_segments(tmp_path):
    rng = np.random.default_rng(9)
    index = SparseIndex(tmp_path / "idx")
    big = {f"b{n}": _record(rng) for n in range(9000)}
    index.upsert(list(big), list(big.values()))
    index.persist()
    first = {p.name for p in (tmp_path / "idx").glob("segment-*")}
    for step in range(10):  # ten passes of a few changes each
        index.upsert([f"n{step}-{n}" for n in range(5)], [_record(rng) for _ in range(5)])
        index.persist()
        assert first <= {p.name for p in (tmp_path / "idx").glob("segment-*")}, "the big segment was rewritten"
    loaded = SparseIndex.load(tmp_path / "idx")
    assert len(loaded) == len(index) == 9050 and len(loaded._segments) < 5


def test_a_crash_between_a_merge_and_its_manifest_leaves_the_saved_index_whole(tmp_path):
    rng = np.random.default_rng(10)
    index = SparseIndex(tmp_path / "idx")
    for step in range(3):
        index.upsert([f"r{step}-{n}" for n in range(10)], [_record(rng) for _ in range(10)])
        index.persist()
    saved = SparseIndex.load(tmp_path / "idx")
    # The next pass merges segments and writes the merged file, then "crashes" before the manifest.
    index.upsert([f"r3-{n}" for n in range(10)], [_record(rng) for _ in range(10)])
    index._seal()
    merged = index._segments[-1]
    np.savez(tmp_path / "idx" / "segment-999999-000.npz", data=merged.matrix.data)
    (tmp_path / "idx" / "DIRTY").unlink()  # even a lost marker cannot make the old manifest name the new file
    again = SparseIndex.load(tmp_path / "idx")
    query = (np.arange(2000), np.ones(2000))
    assert again.search(*query, k=40) == saved.search(*query, k=40) and len(again) == 30


def test_a_pass_of_deletes_only_reclaims_a_mostly_dead_segment(tmp_path):
    rng = np.random.default_rng(11)
    index = SparseIndex(tmp_path / "idx")
    index.upsert([f"r{n}" for n in range(1000)], [_record(rng) for _ in range(1000)])
    index.persist()
    index.delete([f"r{n}" for n in range(600)])
    index.persist()
    loaded = SparseIndex.load(tmp_path / "idx")
    assert len(loaded.ids) == len(loaded) == 400


def test_a_write_waits_while_a_query_holds_the_index():
    import threading

    rng = np.random.default_rng(7)
    index = SparseIndex()
    index.upsert(["a"], [_record(rng)])
    written = threading.Event()
    writer = threading.Thread(target=lambda: (index.upsert(["b"], [_record(rng)]), written.set()))
    with index.lock:  # what a query does from its filter rows to the end of both sides
        writer.start()
        assert not written.wait(0.3)  # cannot finish: the lock is held (a hang here would be the bug)
        assert "b" not in index.row_of
    writer.join(10)
    assert written.is_set() and "b" in index.row_of


def test_queries_from_many_threads_see_consistent_rows_while_writes_seal_and_merge():
    # `headwater serve` answers searches on several threads while a sync writes: every query must
    # keep its row numbers valid from its filter rows to its hits, although writes seal and merge.
    import threading

    rng = np.random.default_rng(11)
    index = SparseIndex()
    failures: list[BaseException] = []
    stop = threading.Event()

    def write() -> None:
        for step in range(300):
            batch = {f"w{step}-{n}": _record(rng, source=("s", "t")[n % 2], uri=f"dir{n % 3}/d{step}.md")
                     for n in range(20)}
            index.upsert(list(batch), list(batch.values()))
            if step % 3 == 0:
                index.delete([f"w{step - 1}-{n}" for n in range(0, 20, 2)])
        stop.set()

    def query() -> None:
        terms = np.arange(0, 2000, 7)
        try:
            while not stop.is_set():
                with index.lock:
                    rows = index.location_rows("t", "dir1")
                    for record_id, _ in index.search(terms, np.ones(terms.size), 10, rows=rows):
                        row = index.row_of[record_id]  # alive, and still the row the query ranked
                        assert index.sources[row] == "t" and index.uris[row].startswith("dir1/")
        except BaseException as exc:  # noqa: BLE001  (reported by the main thread)
            failures.append(exc)

    threads = [threading.Thread(target=write)] + [threading.Thread(target=query) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(t.is_alive() for t in threads) and not failures, failures


def _dense_copy(index: SparseIndex) -> dict[str, np.ndarray]:
    """id -> the dense vector the index holds for every live row."""
    rows = np.flatnonzero(index.location_rows(None, None))
    blocks = index.dense_blocks(rows)
    assert blocks is not None, "every row was written with its vector"
    return {index.ids[r]: vector for numbers, vectors in blocks for r, vector in zip(numbers.tolist(), vectors)}


def test_dense_vectors_follow_upserts_overwrites_deletes_merges_and_restarts(tmp_path):
    rng = np.random.default_rng(21)
    index, truth = SparseIndex(tmp_path / "idx"), {}
    _apply_history(rng, index, truth, steps=60)  # enough rows to merge segments and drop dead rows
    assert len(index._segments) < 20, "each step sealed a segment: most were merged"
    expected = {record_id: _vector_of(metadata) for record_id, metadata in truth.items()}

    def same(copy):
        assert copy.keys() == expected.keys()
        assert all(np.array_equal(copy[i], expected[i]) for i in expected)

    same(_dense_copy(index))
    index.persist()
    loaded = SparseIndex.load(tmp_path / "idx")  # a restart: read back, not rebuilt
    same(_dense_copy(loaded))
    assert all(isinstance(s.dense, np.memmap) for s in loaded._segments), "mapped from the files, not read"
    same(_dense_copy(SparseIndex.rebuild(FakeCollection(truth))))
    # Later writes on the loaded index: new segments merge with mapped ones.
    more = {f"late{n}": _record(rng) for n in range(300)}
    loaded.upsert(list(more), list(more.values()), [_vector_of(m) for m in more.values()])
    gone = list(truth)[:50]
    loaded.delete(gone)
    for i in gone:
        del expected[i]
    expected.update({i: _vector_of(m) for i, m in more.items()})
    same(_dense_copy(loaded))
    loaded.persist()
    same(_dense_copy(SparseIndex.load(tmp_path / "idx")))


def test_rows_written_without_vectors_have_no_dense_copy():
    rng = np.random.default_rng(22)
    index = SparseIndex()
    with_vectors = {f"v{n}": _record(rng) for n in range(10)}
    index.upsert(list(with_vectors), list(with_vectors.values()), [_vector_of(m) for m in with_vectors.values()])
    index.location_rows(None, None)  # sealed: a segment of its own
    index.upsert(["bare"], [_record(rng)])  # no vector given: its segment cannot be scanned
    rows = index.location_rows(None, None)
    assert index.dense_blocks(np.flatnonzero(rows)) is None
    assert index.dense_blocks(np.flatnonzero(rows)[:10]) is not None, "the first segment's rows still can"


def test_an_index_of_the_previous_format_is_not_loaded(tmp_path):
    import json

    rng = np.random.default_rng(23)
    index = SparseIndex(tmp_path / "idx")
    index.upsert(["a"], [_record(rng)], [np.ones(DIMENSIONS)])
    index.persist()
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    manifest["format"] = 2  # segments without dense vectors: rebuilt once rather than never scanned
    (tmp_path / "idx" / "manifest.json").write_text(json.dumps(manifest))
    assert SparseIndex.load(tmp_path / "idx") is None

"""Dense search under a source or uri-prefix filter, without Chroma's slow `where` evaluation.

At 100,000 chunks Chroma answers an unfiltered nearest-neighbour query in ~1 ms but takes 45-85 ms
with a `where` clause (it evaluates the metadata filter over the whole collection first), while
the same search restricted by an explicit id list (`query(ids=...)`) takes ~10 ms. The derived
sparse index already knows every record's source and uri, so it knows which ids a filter matches
and how many; it also keeps each row's dense vector. Four plans, chosen by how many rows the
filter matches and their share of the collection (tried in the order written here):

- scan: the filter matches at most SCAN_LIMIT rows (or more, where over-fetching does not
  apply) and the index holds their dense vectors (it keeps a copy of each row's vector,
  written, merged and saved with its sparse row): rank those rows exactly with numpy, the collection's own distance on the very float32 values Chroma
  stores, ties by id. No Chroma call at all: ~2.5 ms of CPU for 2,000 rows of 384 dimensions,
  where Chroma's restricted walk took ~50 ms, and the exact answer where HNSW's is approximate.
- over-fetch: the filter matches a large share, so an unfiltered query for max(n * SLACK, search
  ef) / share results holds n matches with room to spare; keep those that match. That is as
  wide a search as Chroma's filtered walk makes (it explores until it holds search-ef allowed
  candidates), so the matches found are as near as the ones it would find. Ids the index does
  not know yet (written since it was read) are checked against their metadata. Too few matches
  (an unlucky query) falls through to the next plan.
- restricted: a selective filter over rows whose vectors the index does not hold; Chroma's own
  query restricted to the matching ids. This is the filtered query Chroma would run for the
  `where` clause, with the filter evaluated by the index.
- exact: a very selective filter (at most EXACT_LIMIT ids) over rows whose vectors the index
  does not hold (rows given to it without them), where Chroma's restricted HNSW walk is
  slowest (~100 ms for 1-100 allowed ids at 100,000 chunks): read the ids' vectors and rank
  them exactly, with the collection's own distance.

The filter is evaluated by the derived index, so the results are the filtered query's as long as
the index is as current as the collection: it is the same index the sparse side reads (within a
second of a write in server mode, at each saved pass for an embedded reader), and ids the
over-fetch meets that it does not know yet are checked against the collection. An arbitrary
`where` clause is Chroma's to evaluate: those queries go to Chroma unchanged.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from headwater.store import chroma_store as keys

if TYPE_CHECKING:  # scipy, under the sparse index, is imported only where a sparse index is opened
    from headwater.retrieval.sparse_index import SparseIndex

# Over-fetch twice what the filter's share predicts, so a query whose neighbours are unevenly
# spread across sources still finds its n matches in one round.
SLACK = 2.0
# Unfiltered queries beyond this many results cost more than the restricted plan (~10 ms at
# 100,000 chunks): measured 4.5 ms for 1,000 results, 10 ms for 2,500.
MAX_OVERFETCH = 1_000
# Ranking this many vectors read back costs less than Chroma's restricted query (get of 100 ids:
# ~8 ms, of 1,000: ~24 ms; restricted query of 100 ids: ~90 ms, of 2,000: ~9 ms).
EXACT_LIMIT = 1_000
# Up to this many rows, ranking them from the index's own copy of their vectors (~1 us a row)
# costs less than an over-fetching query of up to MAX_OVERFETCH results (~5 ms); beyond it the
# scan still runs where over-fetching does not apply, as it costs far less than Chroma's
# restricted walk (bench/sparse_index_scale.py times each plan).
SCAN_LIMIT = 5_000
# Extra nearest records read so that ties at the cut are broken the same way in every process.
TIE_SLACK = 8
# Chroma's limit on ids in one call (`get` and `query` alike).
IDS_PER_QUERY = keys.GET_IDS_LIMIT

Hits = list[tuple[str, float]]


def overfetch_size(n: int, matching: int, live: int, search_ef: int = 0) -> int | None:
    """How many unfiltered results hold n matches of a filter matching `matching` of `live` rows (and
    explore as widely as a filtered walk with this search ef); None when that would cost more than
    a restricted query."""
    if matching == 0 or live == 0:
        return None
    wanted = min(live, math.ceil(max(n * SLACK, search_ef) * live / matching))
    return wanted if wanted <= MAX_OVERFETCH else None


def collection_space(collection: Any) -> str:
    """The collection's distance function: "cosine", "l2" or "ip"."""
    return ((collection.configuration or {}).get("hnsw") or {}).get("space") or "l2"


def collection_search_ef(collection: Any) -> int:
    """The collection's HNSW search ef (0 when it has none)."""
    return int(((collection.configuration or {}).get("hnsw") or {}).get("ef_search") or 0)


def similarity(distance: float, space: str) -> float:
    """A score where higher is nearer: cosine and inner-product distances are 1 - similarity."""
    return -distance if space == "l2" else 1.0 - distance


def filtered_dense_search(collection: Any, vector: list[float], n: int, where: dict[str, Any] | None,
                          index: SparseIndex | None = None, rows: np.ndarray | None = None,
                          inside: Any = None, space: str = "cosine", search_ef: int = 0) -> Hits:
    """The n nearest records (id, similarity) inside a filter.

    `where` is the filter as a Chroma clause; `rows` (the index rows inside it) and `inside`
    (source_id, uri -> bool) describe the same filter to the index. Without them, or without an
    index, Chroma evaluates `where`.
    """
    if where is None:
        return _query(collection, vector, n, space)
    if index is None or rows is None:
        return _query(collection, vector, n, space, where=where)
    matching = int(np.count_nonzero(rows))
    size = overfetch_size(n, matching, len(index.row_of), search_ef)  # row_of: the live rows (also through a Lazy)
    if matching <= SCAN_LIMIT:
        found = _scanned(vector, n, index, rows, space)
        if found is not None:
            return found
    if size is not None:
        found = _overfetched(collection, vector, n, size, index, rows, inside, space)
        if found is not None:
            return found
    if matching > SCAN_LIMIT:  # more rows than a scan ranks faster than over-fetching: still faster than Chroma
        found = _scanned(vector, n, index, rows, space)
        if found is not None:
            return found
    ids = [index.ids[r] for r in np.flatnonzero(rows).tolist()]
    if len(ids) <= EXACT_LIMIT:
        return _exact(collection, vector, n, ids, space)
    return _restricted(collection, vector, n, ids, space)


def _overfetched(collection: Any, vector: list[float], n: int, size: int, index: SparseIndex, rows: np.ndarray,
                 inside: Any, space: str) -> Hits | None:
    """Matches among the `size` nearest records; None when they are fewer than n and more exist."""
    found = _query(collection, vector, size, space)
    verdicts: dict[str, bool] = {}
    unknown = []
    for record_id, _ in found:
        row = index.row_of.get(record_id)
        if row is None or row >= len(rows):
            unknown.append(record_id)
        else:
            verdicts[record_id] = bool(rows[row])  # the filter's rows, already evaluated for this query
    if unknown:  # written since the index was read: ask the collection where they are
        got = collection.get(ids=unknown, include=["metadatas"])
        for record_id, metadata in zip(got["ids"], got["metadatas"]):
            verdicts[record_id] = inside(metadata.get(keys.SOURCE_ID, ""), metadata.get(keys.URI, ""))
    hits = [(record_id, score) for record_id, score in found if verdicts.get(record_id)]
    if len(hits) >= n or len(found) < size:  # enough, or every record was looked at
        return hits[:n]
    return None


def _scanned(vector: list[float], n: int, index: SparseIndex, rows: np.ndarray, space: str) -> Hits | None:
    """The n nearest of these rows by the index's copy of their vectors (ties by id); None when the
    index does not hold every one's vector."""
    blocks = index.dense_blocks(np.flatnonzero(rows))
    if blocks is None:
        return None
    if not blocks:
        return []
    query = np.asarray(vector, dtype=np.float32)
    numbers = np.concatenate([numbers for numbers, _ in blocks])
    distances = np.concatenate([exact_distances(query, vectors, space) for _, vectors in blocks])
    if len(distances) > n:  # only rows as near as the n-th can be in the answer (ties included)
        near = np.flatnonzero(distances <= np.partition(distances, n - 1)[n - 1])
        numbers, distances = numbers[near], distances[near]
    ids = [index.ids[r] for r in numbers.tolist()]
    order = np.lexsort((np.asarray(ids), distances))[:n]
    return [(ids[i], similarity(float(distances[i]), space)) for i in order.tolist()]


def _restricted(collection: Any, vector: list[float], n: int, ids: list[str], space: str) -> Hits:
    """Chroma's query over these ids only (in pieces of Chroma's id limit, merged by similarity)."""
    hits: Hits = []
    for start in range(0, len(ids), IDS_PER_QUERY):
        hits.extend(_query(collection, vector, n, space, ids=ids[start:start + IDS_PER_QUERY]))
    if len(ids) > IDS_PER_QUERY:
        hits.sort(key=lambda hit: (-hit[1], hit[0]))
    return hits[:n]


def _exact(collection: Any, vector: list[float], n: int, ids: list[str], space: str) -> Hits:
    """Every one of these ids ranked by the collection's own distance (ties by id)."""
    if not ids:
        return []
    got = collection.get(ids=ids, include=["embeddings"])
    if not got["ids"]:
        return []
    distances = exact_distances(np.asarray(vector, dtype=np.float32),
                                np.asarray(got["embeddings"], dtype=np.float32), space)
    order = np.lexsort((np.asarray(got["ids"]), distances))[:n]
    return [(got["ids"][i], similarity(float(distances[i]), space)) for i in order.tolist()]


def exact_distances(query: np.ndarray, vectors: np.ndarray, space: str) -> np.ndarray:
    """Chroma's distance from `query` to each row of `vectors` (hnswlib's: l2 is squared)."""
    if space == "cosine":
        norms = np.linalg.norm(vectors, axis=1) * (np.linalg.norm(query) or 1.0)
        return 1.0 - (vectors @ query) / np.where(norms == 0, 1.0, norms)
    if space == "ip":
        return 1.0 - vectors @ query
    return np.sum((vectors - query) ** 2, axis=1)


def _query(collection: Any, vector: list[float], n: int, space: str, **restriction: Any) -> Hits:
    """Chroma's n nearest, equally near records in order of id.

    Records with identical vectors (the same chunk text in two sources) are equally near, and
    HNSW returns them in no fixed order: two processes searching the same collection (`headwater
    serve` and `headwater query`) ranked them differently. A few results more than asked for,
    sorted by (distance, id), give the same order everywhere.
    """
    result = collection.query(query_embeddings=[vector], n_results=n + TIE_SLACK, include=["distances"],
                              **restriction)
    nearest = sorted(zip(result["distances"][0], result["ids"][0]))[:n]
    return [(record_id, similarity(distance, space)) for distance, record_id in nearest]

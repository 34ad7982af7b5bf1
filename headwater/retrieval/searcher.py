"""Search over a synced collection: dense (Chroma), sparse (the derived SPLADE index) and hybrid (RRF).

Results are documents by default (each with its best chunk and its other matching chunks), or
chunks (`group_by="chunk"`). Every surface (`headwater query`, `/api/v1/search`, the dashboard and
`headwater.search`) calls Searcher.search, so the fusion and the grouping are decided here only.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from headwater.store import chroma_store as keys
from headwater.store.chroma_store import ChromaStore
from headwater.pipeline.stores import open_store
from headwater.retrieval.filtered_dense import collection_search_ef, collection_space, filtered_dense_search
from headwater.lazy import Lazy
from headwater.settings import Settings
from headwater.retrieval.locations import uri_under
from headwater.pipeline.dense_source import check_query_source, dense_embedder
from headwater.pipeline.embed_dense import DenseEmbedder
from headwater.pipeline.embed_sparse import SpladeEncoder

if TYPE_CHECKING:  # scipy, under the sparse index, is imported only where a sparse index is opened
    from headwater.retrieval.sparse_index import SparseIndex

Mode = Literal["auto", "dense", "sparse", "hybrid"]
MODES = ("auto", "hybrid", "dense", "sparse")
GroupBy = Literal["document", "chunk"]
GROUPINGS = ("document", "chunk")
# Reciprocal rank fusion: score = sum over rankings of weight / (RRF_K + rank), ranks from 1.
# Chosen on the dev sets of bench/retrieval.py (`--dev --fusion-grid`), never on the reported
# ones: with every chunk header carrying its document's summary (chunker 5), 20 and the dense side
# weighted 3 to 1 (MiniLM ranks better than SPLADE-tiny alone; SPLADE mostly breaks its ties) had
# the best mean MRR@10 over the three dev sets (0.879: 0.863 stdlib docs, 0.903 click, 0.872
# starlette), at least as good as the 5 and 1.5:1 chosen for chunker 4 on each set (0.870 mean)
# and above the RRF paper's 60 and 1:1 (0.843).
RRF_K = 20
DENSE_WEIGHT = 3.0
SPARSE_WEIGHT = 1.0
# Each side contributes this many candidates (at least) to the fusion.
MIN_CANDIDATES = 50
# The default mode ("auto"), per collection: hybrid where most of its documents are source code,
# dense otherwise. Measured on the dev sets (bench/retrieval.py `--dev --fusion-grid`, docs/search.md):
# SPLADE-tiny adds what dense misses about code names (hybrid +0.02 to +0.05 MRR@10 on three of the
# four code dev sets, -0.003 on starlette's) but not about prose (no fusion setting ranks above dense
# alone on the docstrings), so on prose the default is dense, and hybrid stays one `--mode hybrid` away.
CODE_SHARE_FOR_HYBRID = 0.5
# Collections too large to list every document are judged by a sample of this many chunks (Chroma Cloud).
KIND_SAMPLE = 2_000
# A document result lists up to this many of its other matching chunks (with their text); it
# always says how many matched in all.
OTHER_CHUNKS_SHOWN = 5
# A document search deepens each side (4x at a time) while it holds fewer than k documents, so a
# few long documents cannot crowd the rest out of the window; never beyond this many chunks.
MAX_DOCUMENT_DEPTH = 12_800


def hybrid_candidates(k: int) -> int:
    """How many candidates each side gives the fusion of a hybrid search for k hits."""
    return max(MIN_CANDIDATES, 3 * k)


@dataclass(frozen=True)
class SearchHit:
    id: str
    uri: str
    text: str
    score: float
    metadata: dict[str, Any]
    dense_rank: int | None = None
    sparse_rank: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DocumentHit:
    """One document: its best chunk and that chunk's score, its rank on each side and its other matching chunks.

    The ranks are the document's (the rank of its best chunk among the distinct documents on that
    side); each chunk keeps its own chunk ranks. `id`, `text` and `metadata` are the best chunk's.
    """

    uri: str
    source_id: str
    score: float
    best_chunk: SearchHit
    other_chunks: list[SearchHit]
    matching_chunks: int
    dense_rank: int | None = None
    sparse_rank: int | None = None

    @property
    def id(self) -> str:
        return self.best_chunk.id

    @property
    def text(self) -> str:
        return self.best_chunk.text

    @property
    def metadata(self) -> dict[str, Any]:
        return self.best_chunk.metadata

    def to_json(self) -> dict[str, Any]:
        return {"uri": self.uri, "source_id": self.source_id, "score": self.score, "dense_rank": self.dense_rank,
                "sparse_rank": self.sparse_rank, "matching_chunks": self.matching_chunks,
                "best_chunk": self.best_chunk.to_json(), "other_chunks": [c.to_json() for c in self.other_chunks]}


Hit = SearchHit | DocumentHit
Scored = list[tuple[str, float]]  # (chunk id, score), best first
DocumentKey = tuple[str, str]  # (source id, uri)


@dataclass(frozen=True)
class Filters:
    """Applied identically to both sides: a source, a uri prefix (whole path segments) and any Chroma `where`."""

    source_id: str | None = None
    uri_prefix: str | None = None
    where: dict[str, Any] | None = field(default=None, hash=False)

    def chroma_where(self) -> dict[str, Any] | None:
        """The same filters as one Chroma where clause."""
        clauses: list[dict[str, Any]] = []
        if self.source_id is not None:
            clauses.append({keys.SOURCE_ID: self.source_id})
        prefix = self._prefix()
        if prefix:
            clauses.append({"$or": [{keys.URI: prefix}, {keys.URI_DIRS: {"$contains": prefix}}]})
        if self.where:
            clauses.append(self.where)
        if not clauses:
            return None
        return clauses[0] if len(clauses) == 1 else {"$and": clauses}

    def _prefix(self) -> str | None:
        return self.uri_prefix.strip("/") if self.uri_prefix else None

    def location_key(self) -> tuple[str | None, str | None] | None:
        """The source and prefix part as a hashable key; None when there is none."""
        prefix = self._prefix()
        return (self.source_id, prefix) if self.source_id is not None or prefix else None

    def location_where(self) -> dict[str, Any] | None:
        """Only the source and prefix part, as a Chroma where clause."""
        return Filters(self.source_id, self.uri_prefix).chroma_where()

    def matches_location(self, source_id: str, uri: str) -> bool:
        """The source and prefix tests, without asking Chroma."""
        prefix = self._prefix()
        return (self.source_id is None or source_id == self.source_id) and (not prefix or uri_under(uri, prefix))


def rrf_fuse(rankings: list[tuple[list[str], float]], k: int = RRF_K) -> list[tuple[str, float]]:
    """Fuse ranked id lists (best first) with weights; returns (id, fused score), best first."""
    fused: dict[str, float] = {}
    for ids, weight in rankings:
        for rank, record_id in enumerate(ids, start=1):
            fused[record_id] = fused.get(record_id, 0.0) + weight / (k + rank)
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))


def collapse(ranked: Scored, document_of: dict[str, Any]) -> list[tuple[Any, float]]:
    """Each document once, at the place of its best chunk in `ranked`, with that chunk's score."""
    seen: dict[Any, float] = {}
    for record_id, chunk_score in ranked:
        document = document_of.get(record_id)
        if document is not None and document not in seen:
            seen[document] = chunk_score
    return list(seen.items())


def kind_of_collection(uris: Any) -> Mode:
    """The default mode for a collection with these document uris: hybrid for mostly code, dense for prose."""
    from headwater.pipeline.code_chunks import code_language

    documents = set(uris)
    code = sum(code_language(uri) is not None for uri in documents)
    return "hybrid" if documents and code / len(documents) >= CODE_SHARE_FOR_HYBRID else "dense"


class Searcher:
    """Holds the query-side models and the sparse index for one collection."""

    def __init__(self, store: ChromaStore, dense: DenseEmbedder, sparse: SpladeEncoder,
                 index: SparseIndex | None, index_dir: Path | None = None, follower: Any = None) -> None:
        self.store = store
        self.follower = follower  # a FollowedIndex, against a Chroma server
        self.dense = dense
        self.sparse = sparse
        self.index = index
        self.index_dir = index_dir
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="headwater-dense")
        self.space = collection_space(store.collection)  # how Chroma's distances become scores
        self.search_ef = collection_search_ef(store.collection)  # how wide a filtered dense search looks
        self._default_mode: Mode | None = None  # what "auto" means here, and the index it was judged from
        self._judged_generation: tuple[int, int] | None = None

    def search(self, text: str, k: int = 10, mode: Mode = "auto", filters: Filters | None = None,
               rrf_k: int = RRF_K, dense_weight: float = DENSE_WEIGHT,
               sparse_weight: float = SPARSE_WEIGHT, group_by: GroupBy = "document") -> list[Any]:
        """The k best documents for `text` (DocumentHit), or with group_by="chunk" the k best chunks (SearchHit).

        Each hit says where it ranked on each side. Filters and k mean documents in document
        results. mode "auto" is this collection's default (default_mode).
        """
        if not text.strip():
            raise ValueError("the query is empty")
        if mode not in MODES:
            raise ValueError(f"unknown search mode {mode!r}; use auto, hybrid, dense or sparse")
        if group_by not in GROUPINGS:
            raise ValueError(f"unknown grouping {group_by!r}; use document or chunk")
        if k < 1:
            raise ValueError("k must be at least 1")
        mode = self.default_mode() if mode == "auto" else mode
        filters = filters or Filters()
        if group_by == "document":
            return self._search_documents(text, k, mode, filters, rrf_k, dense_weight, sparse_weight)
        candidates = k if mode != "hybrid" else hybrid_candidates(k)
        if self.store.cloud:
            return self._cloud_search(text, k, mode, filters, candidates, rrf_k, dense_weight, sparse_weight)
        dense_ids, sparse_ids, _ = self._sides(text, candidates, mode, filters)
        if mode == "dense":
            ranked = [(i, s) for i, s in dense_ids]
        elif mode == "sparse":
            ranked = list(sparse_ids)
        else:
            ranked = rrf_fuse([([i for i, _ in dense_ids], dense_weight),
                               ([i for i, _ in sparse_ids], sparse_weight)], rrf_k)
        ranked = ranked[:k]
        dense_rank = {record_id: n for n, (record_id, _) in enumerate(dense_ids, start=1)}
        sparse_rank = {record_id: n for n, (record_id, _) in enumerate(sparse_ids, start=1)}
        return self._hits(ranked, dense_rank, sparse_rank)

    def default_mode(self) -> Mode:
        """What mode "auto" means for this collection: hybrid where most documents are code, else dense (kind_of_collection)."""
        if self.store.cloud:
            if self._default_mode is None:  # no local index to list documents from: a sample of chunks
                sample = self.store.collection.get(limit=KIND_SAMPLE, include=["metadatas"])["metadatas"]
                self._default_mode = kind_of_collection(m.get(keys.URI, "") for m in sample)
            return self._default_mode
        self._refresh_index()
        index = self.index
        if index is None:  # nothing to judge by (a searcher built without an index can only search dense)
            return "dense"
        # Judged again whenever the index changes (a sync can turn a prose collection into a code one).
        if self._default_mode is None or self._judged_generation != (id(index), index.generation()):
            with index.lock:
                uris = [index.uris[r] for r in np.flatnonzero(index.alive).tolist()]
                self._judged_generation = (id(index), index.generation())
            self._default_mode = kind_of_collection(uris)
        return self._default_mode

    def _sides(self, text: str, n: int, mode: Mode, filters: Filters) -> tuple[Scored, Scored, Any]:
        """Each side's n best chunks (the side a single mode does not use is empty), and the index they were read from."""
        if self.store.cloud:
            return self._cloud_sides(text, n, mode, filters)
        # Read before the two sides start: they share the index, and refreshing it mutates it. An
        # unfiltered dense query needs no index (and so never opens or imports it).
        index = None
        if mode != "dense" or filters.location_key() is not None:
            self._refresh_index()
            index = self.index  # one index for the whole query, whatever a refresh swaps in meanwhile
        # Row numbers are only meaningful while no write seals, merges or renumbers the index, so
        # the query holds the index's lock from reading its filter rows to the end of both sides
        # (a sync or a followed write in another thread of `headwater serve` waits for it).
        with index.lock if index is not None else contextlib.nullcontext():
            rows = self._location_rows(index, filters)
            if mode == "hybrid":
                # The two sides share nothing until fusion, and both models and Chroma release the GIL.
                dense_future = self._pool.submit(self._dense, text, n, filters, index, rows)
                sparse_ids = self._sparse(text, n, filters, index, rows)
                dense_ids = dense_future.result()
            else:
                dense_ids = self._dense(text, n, filters, index, rows) if mode == "dense" else []
                sparse_ids = self._sparse(text, n, filters, index, rows) if mode == "sparse" else []
        return dense_ids, sparse_ids, index

    def _search_documents(self, text: str, k: int, mode: Mode, filters: Filters, rrf_k: int,
                          dense_weight: float, sparse_weight: float) -> list[DocumentHit]:
        """The k best documents, each at the place of its best chunk in the chunk ranking, with its matching chunks."""
        depth = hybrid_candidates(k)
        while True:
            dense_ids, sparse_ids, index = self._sides(text, depth, mode, filters)
            document_of = self._documents_of([i for i, _ in dense_ids] + [i for i, _ in sparse_ids], index)
            # A side that filled its window with fewer than k documents may hold more below it.
            short = [side for side in (dense_ids, sparse_ids)
                     if len(side) >= depth and len({document_of.get(i) for i, _ in side} - {None}) < k]
            if not short or depth >= MAX_DOCUMENT_DEPTH:
                break
            depth = min(depth * 4, MAX_DOCUMENT_DEPTH)
        dense_doc_rank = {d: n for n, (d, _) in enumerate(collapse(dense_ids, document_of), start=1)}
        sparse_doc_rank = {d: n for n, (d, _) in enumerate(collapse(sparse_ids, document_of), start=1)}
        # Documents take the place of their best chunk in the chunk ranking (one side's, or RRF of both):
        # fusing chunks, then grouping, beat fusing each side's document ranks on every dev set but the
        # docstrings' (mean MRR@10 over the five: 0.843 against at most 0.827; docs/search.md). The
        # same ranking orders each document's chunks.
        if mode == "hybrid":
            chunk_order = rrf_fuse([([i for i, _ in dense_ids], dense_weight),
                                    ([i for i, _ in sparse_ids], sparse_weight)], rrf_k)
        else:
            chunk_order = list(dense_ids if mode == "dense" else sparse_ids)
        documents = collapse(chunk_order, document_of)
        chunks_of: dict[Any, list[tuple[str, float]]] = {}
        for record_id, chunk_score in chunk_order:
            chunks_of.setdefault(document_of.get(record_id), []).append((record_id, chunk_score))
        dense_rank = {record_id: n for n, (record_id, _) in enumerate(dense_ids, start=1)}
        sparse_rank = {record_id: n for n, (record_id, _) in enumerate(sparse_ids, start=1)}
        picked = documents[:k]
        wanted = [c for d, _ in picked for c in chunks_of[d][:OTHER_CHUNKS_SHOWN + 1]]
        hits = {h.id: h for h in self._hits(wanted, dense_rank, sparse_rank)}
        results = []
        for document, score in picked:
            shown = [hits[i] for i, _ in chunks_of[document] if i in hits]  # a chunk deleted since is left out
            if not shown:
                continue
            results.append(DocumentHit(document[1], document[0], float(score), shown[0], shown[1:OTHER_CHUNKS_SHOWN + 1],
                                       len(chunks_of[document]), dense_doc_rank.get(document),
                                       sparse_doc_rank.get(document)))
        return results

    def _documents_of(self, ids: list[str], index: Any) -> dict[str, DocumentKey]:
        """chunk id -> (source id, uri): from the sparse index where it holds the chunk, else from Chroma."""
        found: dict[str, DocumentKey] = {}
        if index is not None:
            for record_id in ids:
                row = index.row_of.get(record_id)
                if row is not None:
                    found[record_id] = (index.sources[row], index.uris[row])
        missing = [i for i in dict.fromkeys(ids) if i not in found]
        if missing:  # dense's candidates without an index (an unfiltered dense search), or written since it was read
            got = self.store.collection.get(ids=missing, include=["metadatas"])
            for record_id, metadata in zip(got["ids"], got["metadatas"]):
                found[record_id] = (metadata.get(keys.SOURCE_ID, ""), metadata.get(keys.URI, ""))
        return found

    def _cloud_search(self, text: str, k: int, mode: Mode, filters: Filters, candidates: int, rrf_k: int,
                      dense_weight: float, sparse_weight: float) -> list[SearchHit]:
        """Chunk results in one server-side request on Chroma Cloud (native sparse index, Knn + Rrf)."""
        from headwater.store.cloud import hybrid_search_request

        indices, values = self.sparse.encode([text])[0]
        request = hybrid_search_request(self.dense.embed([text])[0], indices, values, k, candidates,
                                        filters.chroma_where(), rrf_k, dense_weight, sparse_weight, mode)
        result = self.store.collection.search(request)
        hits = []
        for record_id, document, metadata, score in zip(result["ids"][0], result["documents"][0],
                                                        result["metadatas"][0], result["scores"][0]):
            shown = {key: value for key, value in (metadata or {}).items() if key not in (keys.SPARSE, "sparse_embedding")}
            # Chroma orders ascending: RRF scores come back negated, distances as they are.
            score = -score if mode == "hybrid" else (1.0 - score if mode == "dense" else -score)
            hits.append(SearchHit(record_id, shown.get(keys.URI, ""), document, float(score), shown))
        return hits

    def _cloud_sides(self, text: str, n: int, mode: Mode, filters: Filters) -> tuple[Scored, Scored, None]:
        """Each side's n best chunks on Chroma Cloud, one request per side, for fusion here (document results)."""
        from headwater.store.cloud import hybrid_search_request

        # The request names both sides whichever it ranks by: the side not asked for gets a placeholder.
        dense_vector = self.dense.embed([text])[0] if mode != "sparse" else [0.0]
        indices, values = self.sparse.encode([text])[0] if mode != "dense" else (np.array([0]), np.array([0.0]))
        sides: dict[str, Scored] = {"dense": [], "sparse": []}
        for side in ("dense", "sparse"):
            if mode in (side, "hybrid"):
                request = hybrid_search_request(dense_vector, indices, values, n, n, filters.chroma_where(),
                                                RRF_K, 1.0, 1.0, side)
                result = self.store.collection.search(request)
                # Chroma orders ascending: distances as they are, sparse scores negated.
                sides[side] = [(i, float(1.0 - s if side == "dense" else -s))
                               for i, s in zip(result["ids"][0], result["scores"][0])]
        return sides["dense"], sides["sparse"], None

    @staticmethod
    def _location_rows(index: SparseIndex | None, filters: Filters) -> np.ndarray | None:
        """Which index rows are inside the filter's source and uri prefix; None without such a filter."""
        key = filters.location_key()
        if key is None or index is None:
            return None
        return index.location_rows(*key)

    def _dense(self, text: str, n: int, filters: Filters, index: SparseIndex | None,
               rows: np.ndarray | None) -> list[tuple[str, float]]:
        vector = self.dense.embed([text])[0].tolist()
        if filters.where:  # an arbitrary clause is Chroma's to evaluate
            return filtered_dense_search(self.store.collection, vector, n, filters.chroma_where(), space=self.space)
        return filtered_dense_search(self.store.collection, vector, n, filters.location_where(), index, rows,
                                     filters.matches_location, self.space, self.search_ef)

    def _sparse(self, text: str, n: int, filters: Filters, index: SparseIndex,
                rows: np.ndarray | None) -> list[tuple[str, float]]:
        indices, values = self.sparse.encode([text])[0]
        if not filters.where:
            return index.search(indices, values, n, rows=rows)

        def accept(candidates: list[int]) -> list[bool]:
            # Arbitrary metadata filters are Chroma's to evaluate, on just these candidates.
            ids = [index.ids[r] for r in candidates]
            allowed = set(self.store.collection.get(ids=ids, where=filters.where, include=[])["ids"]) if ids else set()
            return [index.ids[r] in allowed for r in candidates]

        return index.search(indices, values, n, accept, rows=rows)

    def _refresh_index(self) -> None:
        """Pick up writes: from the server's write log, or a newer index saved by an embedded writer."""
        if self.follower is not None:
            self.index = self.follower.refresh()
            return
        if self.index_dir is None:
            return
        from headwater.retrieval.sparse_index import SparseIndex

        saved = SparseIndex.saved_generation(self.index_dir)
        if saved is not None and saved != self.index.generation():
            fresh = SparseIndex.load(self.index_dir)
            if fresh is not None:
                self.index = fresh

    def _hits(self, ranked: list[tuple[str, float]], dense_rank: dict[str, int],
              sparse_rank: dict[str, int]) -> list[SearchHit]:
        if not ranked:
            return []
        ids = [record_id for record_id, _ in ranked]
        found = self.store.collection.get(ids=ids, include=["documents", "metadatas"])
        by_id = {i: (d, m) for i, d, m in zip(found["ids"], found["documents"], found["metadatas"])}
        hits = []
        for record_id, score in ranked:
            if record_id not in by_id:  # deleted since the index was read
                continue
            text, metadata = by_id[record_id]
            shown = {k: v for k, v in metadata.items() if k != keys.SPARSE}
            hits.append(SearchHit(record_id, metadata.get(keys.URI, ""), text, float(score), shown,
                                  dense_rank.get(record_id), sparse_rank.get(record_id)))
        return hits


def open_searcher(settings: Settings, mode: Mode | None = None, *, one_off: bool = False) -> Searcher:
    """A Searcher for the configured collection (sparse index loaded or rebuilt; models load on first use).

    With `mode`, the models that mode needs start loading at once, in the background, while Chroma
    opens: a one-off query (the CLI) then waits for the slower of the two, not for their sum.
    `one_off` says this process only reads (the CLI's query): an embedded collection is then read
    through Chroma's engine without importing its Python client (headwater.store.engine_reader).
    """
    from headwater.retrieval.sparse_index_files import open_sparse_index, sparse_index_dir

    # One thread per model: hybrid queries run both sides at once, and two multi-threaded runtimes
    # on the same cores slow each other down (measured: 62 ms -> 21 ms p50 on two cores).
    threads = settings.model_threads or 1
    # Each model loads on first use: `--mode dense` never loads SPLADE, `--mode sparse` never MiniLM.
    dense = Lazy(lambda: dense_embedder(settings, threads))  # the collection's own dense source
    sparse = Lazy(lambda: SpladeEncoder(settings.sparse_model_dir, threads, settings.onnx_cache_dir))
    if mode in ("dense", "hybrid", "auto"):
        dense.prefetch()
    if mode in ("sparse", "hybrid"):  # auto: once the collection's kind says whether SPLADE is needed (below)
        sparse.prefetch()
    store = (one_off and _engine_store(settings)) or open_store(settings, create=False)
    if mode != "sparse":
        check_query_source(settings, (store.collection.metadata or {}).get(keys.DENSE_MODEL_KEY))
    directory = sparse_index_dir(settings)
    follower = following_index(settings, store) if settings.chroma_host and not store.cloud else None
    if follower is not None:
        index = follower.index
    else:
        # Readers never write an embedded index: only the process holding the writer lock saves it.
        # A dense-only searcher (the CLI's --mode dense) opens it only if it is ever asked for sparse.
        opened = lambda: open_sparse_index(store, directory, save=False)  # noqa: E731
        index = None if store.cloud else (Lazy(opened) if mode == "dense" else opened())
    searcher = Searcher(store, dense, sparse, index, directory, follower)
    # A model still loading in a background thread when the process exits aborts it: auto on a
    # collection of prose never uses SPLADE, so it starts loading only where auto means hybrid.
    if mode == "auto" and searcher.default_mode() == "hybrid":
        sparse.prefetch()
    return searcher


def _engine_store(settings: Settings) -> Any:
    """An embedded collection opened through Chroma's engine alone; None for servers or where it cannot be."""
    if settings.is_remote:
        return None
    from headwater.store.engine_reader import open_engine_reader

    return open_engine_reader(settings.chroma_path, settings.collection)


def following_index(settings: Settings, store: ChromaStore) -> Any:
    """A sparse index on disk that follows the server collection's write log; None without Redis."""
    import logging

    from headwater.redis_connection import redis_client
    from headwater.retrieval.write_log import FollowedIndex

    redis = redis_client(settings)
    try:
        redis.ping()
    except Exception as exc:  # noqa: BLE001  (no Redis: rebuild in memory, as a one-off reader would)
        logging.getLogger(__name__).warning("no Redis at the configured URL (%s); the sparse index is rebuilt "
                                            "in memory and does not follow new writes", type(exc).__name__)
        return None
    place = f"{settings.chroma_host}-{settings.chroma_port}"
    return FollowedIndex(store, redis, settings.sparse_index_dir / place / settings.collection)

"""Chroma Cloud: native sparse vector index and server-side hybrid search (Knn + Rrf).

Chroma Cloud indexes sparse vectors itself, so there the SPLADE vector is also written as a
SparseVector under SPARSE_KEY, declared in the collection schema, and hybrid queries run as
one `collection.search()` request. Local and self-hosted Chroma cannot do either; they use the
derived index in headwater.retrieval.sparse_index instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from headwater.store import chroma_store as keys

# Metadata key of the native sparse vector (the encoded string stays in keys.SPARSE for reuse).
SPARSE_KEY = "sparse_embedding"
# Chroma Cloud rejects writes of more than 300 records.
CLOUD_WRITE_CAP = 300
# A rank that stands for "not among this side's candidates": its RRF share is ~0.
ABSENT_RANK = 1_000_000.0


def cloud_schema() -> Any:
    """The collection schema: cosine dense index, native sparse index on SPARSE_KEY, no index on the encoded copy."""
    from chromadb.api.types import Schema, SparseVectorIndexConfig, StringInvertedIndexConfig, VectorIndexConfig

    return (Schema()
            .create_index(config=VectorIndexConfig(space="cosine", embedding_function=None))
            .create_index(config=SparseVectorIndexConfig(), key=SPARSE_KEY)
            .delete_index(config=StringInvertedIndexConfig(), key=keys.SPARSE))


def with_native_sparse(metadata: dict[str, Any]) -> dict[str, Any]:
    """A record's metadata with its SPLADE vector added as a Chroma SparseVector."""
    from chromadb.base_types import SparseVector

    from headwater.store.sparse_codec import decode_sparse

    indices, values = decode_sparse(metadata[keys.SPARSE])
    return {**metadata, SPARSE_KEY: SparseVector(indices=indices.tolist(), values=values.tolist())}


def hybrid_search_request(dense_vector: list[float] | np.ndarray, sparse_indices: np.ndarray,
                          sparse_values: np.ndarray, k: int, candidates: int, where: dict[str, Any] | None,
                          rrf_k: int, dense_weight: float, sparse_weight: float,
                          mode: str = "hybrid") -> Any:
    """The Search request for Chroma Cloud: each side's top `candidates`, fused like the local path."""
    from chromadb import Search
    from chromadb.base_types import SparseVector
    from chromadb.execution.expression.operator import Key, Knn, Rrf

    dense = Knn(query=[float(x) for x in dense_vector], limit=candidates, return_rank=mode == "hybrid",
                default=ABSENT_RANK if mode == "hybrid" else None)
    sparse = Knn(query=SparseVector(indices=[int(i) for i in sparse_indices], values=[float(v) for v in sparse_values]),
                 key=SPARSE_KEY, limit=candidates, return_rank=mode == "hybrid",
                 default=ABSENT_RANK if mode == "hybrid" else None)
    if mode == "dense":
        rank: Any = dense
    elif mode == "sparse":
        rank = sparse
    else:
        # Chroma's ranks start at 0, the RRF formula's at 1: k + 1 makes the two scores identical.
        rank = Rrf([dense, sparse], k=rrf_k + 1, weights=[dense_weight, sparse_weight])
    request = Search(where=where, rank=rank, limit=k)
    return request.select(Key.DOCUMENT, Key.SCORE, Key.METADATA)

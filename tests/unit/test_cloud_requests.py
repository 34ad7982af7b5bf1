"""The exact requests built for Chroma Cloud (which cannot be reached from tests)."""

import numpy as np

from headwater.store.chroma_store import write_batch_limit
from headwater.store.cloud import SPARSE_KEY, cloud_schema, hybrid_search_request, with_native_sparse
from headwater.retrieval.searcher import Filters, rrf_fuse
from headwater.store.sparse_codec import encode_sparse


def _knn(query, key, limit, ranked=True):
    body = {"query": query, "key": key, "limit": limit}
    if ranked:
        body.update(default=1_000_000.0, return_rank=True)
    return {"$knn": body}


def test_hybrid_request_fuses_dense_and_native_sparse_with_rrf():
    where = Filters(source_id="docs", uri_prefix="ops/").chroma_where()
    request = hybrid_search_request([0.25, -0.5], np.array([7, 3001]), np.array([1.5, 0.25]), k=10, candidates=50,
                                    where=where, rrf_k=60, dense_weight=2.0, sparse_weight=1.0).to_dict()
    sparse_query = {"#type": "sparse_vector", "indices": [7, 3001], "values": [1.5, 0.25]}
    assert request["rank"] == {"$mul": [{"$val": -1}, {"$sum": [
        {"$div": {"left": {"$val": 2.0}, "right": {"$sum": [{"$val": 61}, _knn([0.25, -0.5], "#embedding", 50)]}}},
        {"$div": {"left": {"$val": 1.0}, "right": {"$sum": [{"$val": 61}, _knn(sparse_query, SPARSE_KEY, 50)]}}},
    ]}]}
    assert request["filter"] == {"$and": [{"source_id": {"$eq": "docs"}}, {"$or": [
        {"uri": {"$eq": "ops"}}, {"uri_dirs": {"$contains": "ops"}}]}]}
    assert request["limit"] == {"offset": 0, "limit": 10}
    assert set(request["select"]["keys"]) == {"#document", "#score", "#metadata"}


def test_single_side_requests_rank_by_that_side_only():
    dense = hybrid_search_request([1.0], np.array([1]), np.array([1.0]), 5, 5, None, 5, 1.5, 1.0, mode="dense").to_dict()
    sparse = hybrid_search_request([1.0], np.array([1]), np.array([1.0]), 5, 5, None, 5, 1.5, 1.0, mode="sparse").to_dict()
    assert dense["rank"] == _knn([1.0], "#embedding", 5, ranked=False) and dense["filter"] is None
    assert sparse["rank"]["$knn"]["key"] == SPARSE_KEY


def test_cloud_rrf_equals_the_local_fusion():
    # Chroma ranks from 0; with k + 1 its score equals the local, 1-based formula.
    local = dict(rrf_fuse([(["a", "b"], 2.0), (["b", "a"], 1.0)], k=60))
    assert local["a"] == 2.0 / (61 + 0) + 1.0 / (61 + 1)
    assert local["b"] == 2.0 / (61 + 1) + 1.0 / (61 + 0)


def test_schema_declares_a_native_sparse_index():
    schema = cloud_schema()
    assert schema.keys[SPARSE_KEY].sparse_vector.sparse_vector_index.enabled is True
    assert schema.keys["sparse_vector"].string.string_inverted_index.enabled is False


def test_records_carry_a_native_sparse_vector():
    metadata = with_native_sparse({"uri": "a.md", "sparse_vector": encode_sparse([9, 2], [0.5, 1.0])})
    assert metadata[SPARSE_KEY].indices == [2, 9] and metadata[SPARSE_KEY].values == [1.0, 0.5]


def test_cloud_writes_are_capped_at_300():
    assert write_batch_limit(4000, 5461, cloud=True) == 300
    assert write_batch_limit(4000, 5461, cloud=False) == 4000
    assert write_batch_limit(10_000, 5461, cloud=False) == 4999
    assert write_batch_limit(10_000, 1000, cloud=False) == 1000

"""`headwater push`'s pure parts: targets, what counts as the same record, Cloud's write cap."""

from __future__ import annotations

import numpy as np
import pytest

from headwater.store.chroma_store import write_batch_limit
from headwater.errors import ConfigurationError
from headwater.store.promotion import Target, _comparable, same_vector


def test_targets_parse_from_to():
    assert Target.parse("chroma.internal:9000", token="t0ken-123") == Target(host="chroma.internal", port=9000,
                                                                           token="t0ken-123")
    assert Target.parse("10.0.0.7").port == 8000
    cloud = Target.parse("cloud", cloud_api_key="ck-key", cloud_tenant="t", cloud_database="d")
    assert cloud.cloud and cloud.describe() == "Chroma Cloud" and "ck-key" not in repr(cloud.describe())
    for bad in ("chroma:port", ":8000"):
        with pytest.raises(ConfigurationError, match="HOST:PORT"):
            Target.parse(bad)
    with pytest.raises(ConfigurationError, match="HEADWATER_CHROMA_CLOUD_API_KEY"):
        Target.parse("cloud")


def test_cloud_pushes_write_at_most_300_records_at_a_time():
    assert write_batch_limit(4999, 5461, cloud=True) == 300
    assert write_batch_limit(4999, 5461, cloud=False) == 4999


def test_the_native_sparse_copy_cloud_adds_does_not_make_a_record_differ():
    stored_on_cloud = {"uri": "a.md", "sparse_vector": "s1:abc", "sparse_embedding": {"indices": [1], "values": [0.5]}}
    assert _comparable(stored_on_cloud) == {"uri": "a.md", "sparse_vector": "s1:abc"}


def test_vectors_compare_to_the_last_bit_of_a_float32():
    vector = np.random.default_rng(3).standard_normal(384).astype(np.float32)
    vector /= np.linalg.norm(vector)
    renormalised = vector / np.linalg.norm(vector)  # what a cosine collection does to every vector it is given
    assert same_vector(vector, renormalised)
    assert not same_vector(vector, vector + np.float32(1e-4))

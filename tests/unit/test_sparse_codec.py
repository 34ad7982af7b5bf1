import numpy as np
import pytest

from headwater.store.sparse_codec import decode_sparse, encode_sparse


def test_round_trip_is_exact_to_float16():
    rng = np.random.default_rng(7)
    indices = rng.choice(30522, size=300, replace=False)
    values = rng.uniform(0.01, 4.0, size=300).astype(np.float32)
    got_indices, got_values = decode_sparse(encode_sparse(indices, values))
    order = np.argsort(indices)
    assert np.array_equal(got_indices, indices[order])
    assert np.array_equal(got_values, values[order].astype(np.float16).astype(np.float32))


def test_large_vocabularies_use_wide_indices():
    indices = [3, 70_000, 250_001]
    got_indices, _ = decode_sparse(encode_sparse(indices, [1.0, 2.0, 3.0]))
    assert got_indices.tolist() == indices


def test_empty_vector_round_trips():
    indices, values = decode_sparse(encode_sparse([], []))
    assert indices.size == 0 and values.size == 0


def test_one_string_is_compact():
    encoded = encode_sparse(list(range(200)), [1.0] * 200)
    assert isinstance(encoded, str) and len(encoded) < 1100  # 200 x (2 + 2) bytes, base64


def test_rejects_foreign_strings():
    with pytest.raises(ValueError):
        decode_sparse("not a vector")

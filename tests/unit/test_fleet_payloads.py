"""Dense vectors as the fleet stores them between its embed and write steps."""

from __future__ import annotations

import json

import numpy as np

from headwater.fleet.payloads import pack_dense, unpack_dense


def test_a_dense_vector_comes_back_as_the_floats_embedded_mode_writes():
    vector = np.random.default_rng(7).standard_normal(384).astype(np.float32)
    packed = pack_dense(vector)
    assert len(packed) == 1 + 4 * 384
    assert unpack_dense(packed) == vector.tolist()  # what the embedded engine hands Chroma, exactly


def test_a_vector_stored_as_json_by_an_earlier_version_is_still_read():
    vector = np.random.default_rng(8).standard_normal(384).astype(np.float32)
    legacy = json.dumps([float(x) for x in vector]).encode()
    assert unpack_dense(legacy) == vector.tolist()

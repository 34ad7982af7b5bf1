"""Sparse index segments are mapped from their .npz files, not read: same arrays, no copy."""

from __future__ import annotations

import numpy as np

from headwater.retrieval.npz_mmap import mapped_npz


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {"data": rng.random(50, dtype=np.float32), "indices": np.arange(50, dtype=np.int32),
            "fortran": np.asfortranarray(rng.random((3, 5))), "empty": np.zeros(0, dtype=np.uint8),
            "shape": np.array([30522, 9])}


def test_stored_members_are_mapped_and_equal_to_numpys_loader(tmp_path):
    arrays = _arrays()
    np.savez(tmp_path / "segment.npz", **arrays)
    mapped = mapped_npz(tmp_path / "segment.npz")
    with np.load(tmp_path / "segment.npz") as loaded:
        for name, array in arrays.items():
            assert mapped[name].dtype == array.dtype and np.array_equal(mapped[name], loaded[name])
    assert isinstance(mapped["data"], np.memmap) and isinstance(mapped["indices"], np.memmap)
    mapped["data"][0] = -1.0  # copy-on-write: the file keeps its bytes
    assert mapped_npz(tmp_path / "segment.npz")["data"][0] == arrays["data"][0]


def test_compressed_members_are_read(tmp_path):
    arrays = _arrays()
    np.savez_compressed(tmp_path / "segment.npz", **arrays)
    mapped = mapped_npz(tmp_path / "segment.npz")
    assert all(np.array_equal(mapped[name], array) for name, array in arrays.items())

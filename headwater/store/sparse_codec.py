"""Compact, exact (float16) encoding of a sparse vector into one string metadata value.

Local Chroma cannot index sparse vectors, so each record carries its SPLADE vector in one
string field (one field keeps upserts fast; list-valued keys made them ~6x slower).
Layout, base64 of: 1 byte width (2 or 4 bytes per index), uint32 count,
indices (little-endian, ascending), float16 values.
"""

from __future__ import annotations

import base64
import struct

import numpy as np

PREFIX = "s1:"


def encode_sparse(indices: np.ndarray | list[int], values: np.ndarray | list[float]) -> str:
    """Encode a sparse vector; indices are sorted, values stored as float16."""
    idx = np.asarray(indices, dtype=np.int64)
    val = np.asarray(values, dtype=np.float32)
    if idx.shape != val.shape:
        raise ValueError("sparse vector needs as many values as indices")
    order = np.argsort(idx, kind="stable")
    idx, val = idx[order], val[order]
    if idx.size and (idx[0] < 0 or idx[-1] >= 2**32):
        raise ValueError("sparse indices must lie in [0, 2**32)")
    width = 2 if (not idx.size or idx[-1] < 2**16) else 4
    index_bytes = idx.astype("<u2" if width == 2 else "<u4").tobytes()
    payload = struct.pack("<BI", width, idx.size) + index_bytes + val.astype("<f2").tobytes()
    return PREFIX + base64.b64encode(payload).decode("ascii")


def decode_sparse(encoded: str) -> tuple[np.ndarray, np.ndarray]:
    """Decode to (indices int64, values float32)."""
    if not encoded.startswith(PREFIX):
        raise ValueError("not a Headwater sparse vector (missing 's1:' prefix)")
    payload = base64.b64decode(encoded[len(PREFIX):])
    width, count = struct.unpack_from("<BI", payload)
    start = struct.calcsize("<BI")
    end = start + width * count
    idx = np.frombuffer(payload[start:end], dtype="<u2" if width == 2 else "<u4").astype(np.int64)
    val = np.frombuffer(payload[end:end + 2 * count], dtype="<f2").astype(np.float32)
    if idx.size != count or val.size != count:
        raise ValueError("truncated sparse vector")
    return idx, val

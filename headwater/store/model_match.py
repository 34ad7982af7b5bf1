"""Whether a collection's recorded model is the one about to write or read it: the one comparison of model identities.

A local model's identity is its name and a digest of its files (headwater.pipeline.model_identity);
an embedding service's is endpoint:<model>/<dimensions>@<fingerprint of a probe text's vector>
(headwater.pipeline.embed_endpoint), compared on name and size exactly and on the fingerprint
within float noise: the same model served on other hardware passes, another model behind the
same name does not.
"""

from __future__ import annotations

import hashlib

import numpy as np

_FINGERPRINT_PROJECTIONS = 16


def fingerprint(vector: np.ndarray) -> str:
    """16 fixed projections of the unit probe vector, in units of their spread, as int8 hex.

    Comparing these with a tolerance (`same_fingerprint`) tells the same model on other hardware
    (float noise) from another model behind the same name: for unrelated vectors each projection
    differs by about 1.4 units, so all 16 agreeing within 0.125 by chance is below 1e-15.
    """
    vector = np.asarray(vector, dtype=np.float64)
    unit = vector / (np.linalg.norm(vector) or 1.0)
    dims = unit.shape[0]
    # Sign patterns from SHA-256: the same directions on every machine and numpy release.
    stream = b"".join(hashlib.sha256(f"headwater-probe-{i}".encode()).digest() for i in range(-(-dims * 16 // 256)))
    bits = np.unpackbits(np.frombuffer(stream, dtype=np.uint8))[:dims * _FINGERPRINT_PROJECTIONS]
    signs = bits.reshape(_FINGERPRINT_PROJECTIONS, dims).astype(np.float64) * 2 - 1
    units = signs @ unit  # each ~ N(0, 1/dims) for a unit vector: times sqrt(dims) is ~ N(0, 1)
    quantised = np.clip(np.round(units * 32.0), -127, 127).astype(np.int8)
    return quantised.tobytes().hex()


def same_fingerprint(a: str, b: str, tolerance: int = 4) -> bool:
    """Whether two fingerprints are of the same model (each projection within `tolerance`/32 of a unit)."""
    try:
        x = np.frombuffer(bytes.fromhex(a), dtype=np.int8).astype(int)
        y = np.frombuffer(bytes.fromhex(b), dtype=np.int8).astype(int)
    except ValueError:
        return False
    return x.shape == y.shape and bool(np.all(np.abs(x - y) <= tolerance))


def same_model(recorded: str, wanted: str) -> bool:
    """Whether a collection's recorded model is this one (collections written before digests record the bare name)."""
    if recorded.startswith("endpoint:") and wanted.startswith("endpoint:"):
        (name, _, mine), (other, _, theirs) = recorded.partition("@"), wanted.partition("@")
        return name == other and same_fingerprint(mine, theirs)
    return recorded == wanted or ("@" not in recorded and recorded == wanted.split("@", 1)[0])

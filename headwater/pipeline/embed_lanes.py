"""Both models over a list of texts, spread over lanes that each run dense, then SPLADE, on their share.

Each model runtime uses one thread, and there is one lane per core (settings: model_threads
threads per runtime, cores // model_threads lanes). Giving each model its own core instead left
one core idle for most of a pass, because SPLADE costs about half of what MiniLM does; and two
multi-threaded runtimes taking turns on the same cores slow each other down badly. Both models
compute a text's vector from that text alone, so how texts are dealt to lanes changes nothing
in the vectors.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

SparseVector = tuple[np.ndarray, np.ndarray]


def lane_count(model_threads: int) -> int:
    """Lanes that fill the cores when each runtime uses `model_threads` threads (0: one)."""
    return max(1, (os.cpu_count() or 1) // max(1, model_threads))


def embed_in_lanes(dense: Any, sparse: Any, texts: list[str], lanes: int) -> tuple[np.ndarray, list[SparseVector]]:
    """(dense vectors, SPLADE vectors) for `texts`, in order."""
    lanes = max(1, min(lanes, len(texts)))
    # Dealt longest first, round robin, so lanes get about the same number of word pieces.
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    shares = [order[lane::lanes] for lane in range(lanes)]

    def run(share: list[int]) -> tuple[np.ndarray, list[SparseVector]]:
        part = [texts[i] for i in share]
        return dense.embed(part), sparse.encode(part)

    dense_out = np.zeros((len(texts), dense.dimensions), dtype=np.float32)
    sparse_out: list[Any] = [None] * len(texts)
    if lanes == 1:
        results = [run(shares[0])]
    else:
        with ThreadPoolExecutor(lanes, thread_name_prefix="headwater-embed") as pool:
            results = list(pool.map(run, shares))
    for share, (vectors, sparse_vectors) in zip(shares, results):
        dense_out[share] = vectors
        for row, vector in zip(share, sparse_vectors):
            sparse_out[row] = vector
    return dense_out, sparse_out

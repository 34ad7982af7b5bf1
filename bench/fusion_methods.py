"""Ways to fuse one dense and one sparse candidate list, compared offline by `bench/retrieval.py --dev --fusion-grid`.

Each side's scored candidates are fetched once per query; every setting is then a pure function of
them, so a grid of settings costs no further searches and every setting sees the same candidates.
Reciprocal rank fusion (`headwater.retrieval.searcher.rrf_fuse`, what `headwater.search` uses) reads only
ranks; the convex combinations read scores, normalised per query and side, since MiniLM's cosine
similarities and SPLADE's dot products are on unrelated scales. The feedback settings rank the
sparse side with a query of their own (feedback_query), fetched once per query and setting.
"""

from __future__ import annotations

from collections.abc import Callable
from statistics import fmean, pstdev

import numpy as np

from headwater.retrieval.searcher import rrf_fuse

Scored = list[tuple[str, float]]  # (chunk id, score), best first


def rrf(dense: Scored, sparse: Scored, rrf_k: int, dense_weight: float) -> list[str]:
    """The ids ranked by reciprocal rank fusion, the sparse side weighted 1."""
    return [i for i, _ in rrf_fuse([([i for i, _ in dense], dense_weight), ([i for i, _ in sparse], 1.0)], rrf_k)]


def per_document(pair: dict[str, Scored], uri_of: dict[str, str]) -> tuple[Scored, Scored]:
    """(dense, sparse) with each document once, named by its best chunk there: how document results fuse
    (headwater.retrieval.searcher.fuse_documents), as lists the chunk-level settings can take."""
    sides = []
    for side in ("dense", "sparse"):
        best = {}
        for record_id, chunk_score in pair[side]:
            best.setdefault(uri_of[record_id], (record_id, chunk_score))
        sides.append([(uri, chunk_score) for uri, (_, chunk_score) in best.items()])
    return sides[0], sides[1]


def min_max(scores: list[float]) -> list[float]:
    """Scores mapped onto 0..1 (the best 1); all equal: all 1."""
    low, high = min(scores), max(scores)
    return [1.0 if high == low else (s - low) / (high - low) for s in scores]


def z_scores(scores: list[float]) -> list[float]:
    """Scores as standard deviations from their mean; all equal: all 0."""
    mean, spread = fmean(scores), pstdev(scores)
    return [0.0 if spread == 0 else (s - mean) / spread for s in scores]


def convex(dense: Scored, sparse: Scored, dense_share: float,
           normalise: Callable[[list[float]], list[float]] = min_max) -> list[str]:
    """The ids ranked by `dense_share * dense + (1 - dense_share) * sparse` of normalised scores.

    A candidate one side did not return gets that side's lowest normalised score among its
    candidates: it ranked below all of them there, and counts as the last of them, not as zero
    (which, for z-scores, would rank it above the side's below-average candidates).
    """
    candidates = {i for i, _ in dense} | {i for i, _ in sparse}
    fused: dict[str, float] = {}
    for side, share in ((dense, dense_share), (sparse, 1.0 - dense_share)):
        if not side:
            continue
        normalised = normalise([s for _, s in side])
        floor = min(normalised)
        present = dict(zip((i for i, _ in side), normalised))
        for record_id in candidates:
            fused[record_id] = fused.get(record_id, 0.0) + share * present.get(record_id, floor)
    return [i for i, _ in sorted(fused.items(), key=lambda item: (-item[1], item[0]))]


SparseVector = tuple[np.ndarray, np.ndarray]  # (term indices, weights)


def feedback_query(query: SparseVector, feedback: list[SparseVector], weight: float) -> SparseVector:
    """Rocchio on SPLADE vectors: the query plus `weight` times the mean of the feedback chunks' vectors.

    Each vector is scaled to unit length first, so a long chunk counts no more than a short one and
    the query's own terms keep their share whatever the chunks' lengths. The feedback chunks are
    dense's best hits: the sparse side then also looks for what shares words with them
    (pseudo-relevance feedback guided by the other model). No feedback: the query alone.
    """
    combined: dict[int, float] = {}
    for (indices, values), scale in [(query, 1.0)] + [(vector, weight / len(feedback)) for vector in feedback]:
        norm = float(np.linalg.norm(values)) or 1.0
        for term, value in zip(np.asarray(indices).tolist(), np.asarray(values).tolist()):
            combined[term] = combined.get(term, 0.0) + scale * value / norm
    terms = sorted(combined)
    return np.asarray(terms, dtype=np.int64), np.asarray([combined[t] for t in terms], dtype=np.float32)

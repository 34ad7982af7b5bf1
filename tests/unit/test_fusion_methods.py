"""The offline fusion methods that bench/retrieval.py --fusion-grid compares."""

import numpy as np
import pytest

from bench.fusion_methods import convex, feedback_query, min_max, rrf, z_scores
from headwater.retrieval.searcher import rrf_fuse

DENSE = [("a", 0.9), ("b", 0.8), ("c", 0.1)]
SPARSE = [("c", 30.0), ("d", 10.0), ("a", 9.0)]


def test_rrf_is_the_search_paths_fusion():
    expected = [i for i, _ in rrf_fuse([(["a", "b", "c"], 3.0), (["c", "d", "a"], 1.0)], 20)]
    assert rrf(DENSE, SPARSE, 20, 3.0) == expected


def test_normalisations():
    assert min_max([4.0, 2.0, 0.0]) == [1.0, 0.5, 0.0]
    assert min_max([3.0, 3.0]) == [1.0, 1.0]
    assert z_scores([1.0, 3.0]) == [-1.0, 1.0]
    assert z_scores([2.0, 2.0]) == [0.0, 0.0]


def test_convex_follows_the_share_and_ranks_every_candidate():
    assert convex(DENSE, SPARSE, 1.0)[:3] == ["a", "b", "c"]  # dense alone; d is last
    assert convex(DENSE, SPARSE, 0.0)[0] == "c"  # sparse alone
    assert sorted(convex(DENSE, SPARSE, 0.5)) == ["a", "b", "c", "d"]
    # a: 0.5 * 1 + 0.5 * 0 (sparse min); c: 0.5 * 0 + 0.5 * 1; b: 0.5 * 0.875 + 0.5 * 0 -> a and c tie, by id
    assert convex(DENSE, SPARSE, 0.5)[:2] == ["a", "c"]


def test_a_candidate_missing_from_one_side_counts_as_that_sides_last_not_as_zero():
    # z-scores: dense x 1.22, y 0, w -1.22; sparse w 1, v -1. Missing counted as zero would give y
    # (0 + 0) more than w (-0.61 + 0.5); counted as the side's last, y is -0.5 and ranks below w.
    fused = convex([("x", 2.0), ("y", 1.0), ("w", 0.0)], [("w", 1.0), ("v", 0.0)], 0.5, z_scores)
    assert fused == ["x", "w", "y", "v"]


@pytest.mark.parametrize("normalise", [min_max, z_scores])
def test_an_empty_side_leaves_the_other_sides_order(normalise):
    assert convex(DENSE, [], 0.7, normalise) == ["a", "b", "c"]


QUESTION = (np.array([1, 5]), np.array([3.0, 4.0]))  # length 5: unit vector 0.6, 0.8
CHUNKS = [(np.array([5, 9]), np.array([10.0, 0.0])), (np.array([2]), np.array([0.5]))]  # unit: [5] = 1; [2] = 1


def test_feedback_adds_the_weighted_mean_of_unit_length_chunk_vectors_to_the_unit_length_question():
    indices, values = feedback_query(QUESTION, CHUNKS, 1.0)
    assert indices.tolist() == [1, 2, 5, 9]
    assert np.allclose(values, [0.6, 0.5, 0.8 + 0.5, 0.0])
    indices, values = feedback_query(QUESTION, CHUNKS, 0.5)
    assert np.allclose(values, [0.6, 0.25, 0.8 + 0.25, 0.0])


def test_in_feedback_a_long_chunk_counts_no_more_than_a_short_one():
    long = (np.array([7]), np.array([1000.0]))
    short = (np.array([8]), np.array([0.001]))
    indices, values = feedback_query(QUESTION, [long, short], 1.0)
    assert np.isclose(values[indices.tolist().index(7)], values[indices.tolist().index(8)])


def test_without_feedback_the_query_is_the_question_scaled_to_unit_length():
    indices, values = feedback_query(QUESTION, [], 1.0)
    assert indices.tolist() == [1, 5] and np.allclose(values, [0.6, 0.8])
    assert indices.dtype == np.int64 and values.dtype == np.float32

"""The sparse side's fed-back query of a hybrid search (headwater.retrieval.feedback_query)."""

import numpy as np

from headwater.retrieval import feedback_query

QUESTION = (np.array([1, 5]), np.array([3.0, 4.0]))  # length 5: unit vector 0.6, 0.8
CHUNKS = [(np.array([5, 9]), np.array([10.0, 0.0])), (np.array([2]), np.array([0.5]))]  # unit: [5] = 1; [2] = 1


def test_adds_the_weighted_mean_of_unit_length_chunk_vectors_to_the_unit_length_question():
    indices, values = feedback_query(QUESTION, CHUNKS, 1.0)
    assert indices.tolist() == [1, 2, 5, 9]
    assert np.allclose(values, [0.6, 0.5, 0.8 + 0.5, 0.0])
    indices, values = feedback_query(QUESTION, CHUNKS, 0.5)
    assert np.allclose(values, [0.6, 0.25, 0.8 + 0.25, 0.0])


def test_a_long_chunk_counts_no_more_than_a_short_one():
    long = (np.array([7]), np.array([1000.0]))
    short = (np.array([8]), np.array([0.001]))
    indices, values = feedback_query(QUESTION, [long, short], 1.0)
    assert np.isclose(values[indices.tolist().index(7)], values[indices.tolist().index(8)])


def test_without_feedback_it_is_the_question_scaled_to_unit_length():
    indices, values = feedback_query(QUESTION, [])
    assert indices.tolist() == [1, 5] and np.allclose(values, [0.6, 0.8])
    assert indices.dtype == np.int64 and values.dtype == np.float32

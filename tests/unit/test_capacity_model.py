"""The capacity model: a pool layout's documents per second and the stage that bounds it."""

from __future__ import annotations

import pytest

from bench.capacity_model import Pool, predict

COSTS = {"fetch": 0.01, "parse": 0.09, "dense": 0.4, "sparse": 0.5, "write": 0.05}  # seconds per document


def test_workers_serving_every_queue_share_the_whole_cost():
    one, two = (predict(COSTS, [Pool.all_queues(n)]).documents_per_second for n in (1, 2))
    assert one == pytest.approx(1 / 1.05) and two == pytest.approx(2 * one)


def test_the_slowest_pool_bounds_the_fleet_and_names_its_stage():
    layout = [Pool.parse("4:fetch,parse"), Pool.parse("2:dense@20"), Pool.parse("2:sparse"), Pool.parse("1:write")]
    prediction = predict(COSTS, layout)
    assert prediction.documents_per_second == pytest.approx(2 / 0.5)
    assert prediction.bounding_stage == "sparse"
    faster = predict(COSTS, [*layout[:2], Pool.parse("16:sparse"), layout[3]])
    assert faster.bounding_stage == "write" and faster.documents_per_second == pytest.approx(1 / 0.05)


def test_a_stage_no_pool_serves_is_refused():
    with pytest.raises(ValueError, match="exactly one pool"):
        predict(COSTS, [Pool.parse("1:fetch,parse,dense,sparse")])

"""The fleet's names: crash points, steps, tasks and queues line up."""

from __future__ import annotations

from headwater.fleet import crash, keys
from headwater.fleet.state import DOCUMENT_STEPS, RUN_STEPS
from headwater.models import DocumentChange, Op
from schedules.beat import beat_schedule
from headwater.settings import Settings
from headwater import queues as names


def test_every_step_has_a_task_on_a_known_queue():
    from headwater.fleet.steps import TASK_OF_STEP

    assert set(TASK_OF_STEP) == set(DOCUMENT_STEPS) | set(RUN_STEPS)
    for task in [*TASK_OF_STEP.values(), names.SWEEP]:
        assert names.ROUTES[task] in names.ALL_QUEUES


def test_crash_points_are_unique_and_named_after_steps():
    assert len(set(crash.POINTS)) == len(crash.POINTS)
    steps = {*DOCUMENT_STEPS, *RUN_STEPS, "flush", "admit"}
    assert all(point.split(".")[0] in steps for point in crash.POINTS)


def test_lease_members_round_trip_uris_with_any_characters():
    uri = "dir with spaces/naïve+file|x.md"
    assert keys.split_member(keys.member("run", "fetch", uri)) == ("run", "fetch", uri)


def test_live_changes_order_by_sequence_or_observation_time():
    older = DocumentChange("s", "a", Op.UPSERT, sequence="00000000000000000001")
    newer = DocumentChange("s", "a", Op.DELETE, sequence="00000000000000000002")
    assert older.order_key < newer.order_key
    observed = DocumentChange("s", "a", Op.UPSERT, observed_at=1.5)
    assert observed.order_key == f"{1_500_000_000:020d}"
    assert DocumentChange.from_json(newer.to_json()) == newer


def test_a_change_reads_back_from_older_and_newer_releases():
    change = DocumentChange("s", "a", Op.UPSERT, version="7:3", size=3)
    written_before_size = {k: v for k, v in change.to_json().items() if k != "size"}
    assert DocumentChange.from_json(written_before_size) == DocumentChange("s", "a", Op.UPSERT, version="7:3",
                                                                           observed_at=change.observed_at)
    # A field a newer release adds (in a rolling upgrade) is dropped, not a TypeError at every fetch.
    assert DocumentChange.from_json({**change.to_json(), "added_later": 1}) == change


def test_the_sweeper_is_scheduled_and_never_piles_up():
    schedule = beat_schedule(Settings(sweep_interval_seconds=7))
    entry = schedule["sweep-fleet-leases"]
    assert entry["task"] == names.SWEEP and entry["schedule"] == 7 and entry["options"]["expires"] == 7


def test_consolidation_sweeps_are_scheduled_on_their_own_queue():
    entry = beat_schedule(Settings())["sweep-consolidation"]
    assert entry["task"] == names.CONSOLIDATE_SWEEP and entry["options"]["queue"] == names.CONSOLIDATE_QUEUE
    assert entry["options"]["expires"] == entry["schedule"]

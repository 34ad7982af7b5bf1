"""A worker told to stop (SIGTERM to its main process, as Kubernetes and compose send) loses nothing.

It finishes the step in its hands and hands back what it had reserved but not started, then exits
by itself; another worker completes the run. Production timing and no beat: nothing here can be
rescued by the sweeper, so the run completing shows the stopped worker really finished or handed
back everything it held.

The step is in hand by construction, not by luck: the worker's first embedding batch blocks at a
crash point armed to hold (headwater.fleet.crash) until the test has seen the worker begin its warm
shutdown, and only then is let go.
"""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from headwater.fleet import crash, keys
from headwater.fleet.context import local_target
from headwater.fleet.enqueue import enqueue_sync
from headwater.fleet.state import DENSE
from tests.integration.fleet_harness import FleetProcesses
from tests.integration.test_fleet import spec, write_corpus
from tests.services import chroma_server, redis_server, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
GRACE_SECONDS = 120  # terminationGracePeriodSeconds of every worker pool in infra/k8s
HOLD = "dense.after_take"  # a dense batch taken (its leases held) and not yet embedded
WARM_SHUTDOWN = "worker: Warm shutdown (MainProcess)"  # Celery prints it as its SIGTERM handler sets should_stop


def _held_by_anyone(redis, run_id: str) -> list[str]:  # noqa: ANN001
    return [m.decode() for m in redis.hkeys(keys.HOLDERS) if m.decode().startswith(run_id)]


def test_sigterm_mid_run_finishes_or_hands_back_and_another_worker_completes_the_run(tmp_path):
    with redis_server(tmp_path) as redis_url, chroma_server(tmp_path) as (host, port):
        # Production leases (60 s) and redrives; only the test's hold point is armed.
        processes = FleetProcesses(redis_url, host, port, tmp_path, timing={"HEADWATER_TEST_CRASH_POINTS": "1"})
        try:
            folder = tmp_path / "docs"
            write_corpus(folder, documents=8)
            fleet = processes.client("graceful")
            fleet.crash.arm(HOLD, action=crash.HOLD)
            first = processes.start_worker("first")
            run_id = enqueue_sync(fleet, spec(folder, "docs"), local_target(fleet.settings))
            wait_until(lambda: fleet.crash.held(HOLD) == 1 or first.poll() is not None, 240,
                       "the first dense batch to be in hand")
            assert first.poll() is None, f"the worker exited with {first.returncode}; see {tmp_path}/first.log"
            in_hand = [m for m in _held_by_anyone(fleet.redis, run_id) if keys.split_member(m)[1] == DENSE]
            assert in_hand, f"the held batch holds no dense lease: {_held_by_anyone(fleet.redis, run_id)}"

            os.kill(first.pid, signal.SIGTERM)  # the main process only, as a container runtime does
            log = tmp_path / "first.log"
            wait_until(lambda: WARM_SHUTDOWN in log.read_text(errors="replace") or first.poll() is not None, 60,
                       "the worker to begin its warm shutdown")
            assert first.poll() is None, "the worker exited while its step was still held"
            fleet.crash.release(HOLD)  # the step in hand goes on, inside the grace period
            try:
                code = first.wait(timeout=GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the worker did not stop within the {GRACE_SECONDS}s grace period")
            processes.processes.pop("first")
            assert code == 0, f"the worker exited with {code}; see {tmp_path}/first.log"
            # Nothing is left in the stopped worker's hands: every step it held was finished (its
            # lease released) and every message it had reserved went back to its queue.
            assert _held_by_anyone(fleet.redis, run_id) == []
            assert fleet.redis.hlen("unacked") == 0, "reserved messages were not handed back"
            assert processes.embedded_texts()["dense"] > 0, "the batch in hand was not finished"
            assert not fleet.runs.get(run_id).status.finished, "the run finished on the stopping worker: it took new work after SIGTERM"

            processes.start_worker("second")
            run = processes.wait_for_run(fleet, run_id, 300)
            assert run.status.value == "complete", run.to_json()
            assert processes.documents("graceful") == {p.name for p in folder.iterdir()}
        finally:
            processes.stop()

"""A worker told to stop (SIGTERM to its main process, as Kubernetes and compose send) loses nothing.

It finishes the step in its hands and hands back what it had reserved but not started, then exits
by itself; another worker completes the run. Production timing and no beat: nothing here can be
rescued by the sweeper, so the run completing shows the stopped worker really finished or handed
back everything it held.
"""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from headwater.fleet import keys
from headwater.fleet.context import local_target
from headwater.fleet.enqueue import enqueue_sync
from headwater.fleet.state import DENSE, SPARSE
from tests.integration.fleet_harness import FleetProcesses
from tests.integration.test_fleet import WORDS, spec, write_corpus
from tests.services import chroma_server, redis_server, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
GRACE_SECONDS = 120  # terminationGracePeriodSeconds of every worker pool in infra/k8s


def _held_by_anyone(redis, run_id: str) -> list[str]:  # noqa: ANN001
    return [m.decode() for m in redis.hkeys(keys.HOLDERS) if m.decode().startswith(run_id)]


def test_sigterm_mid_run_finishes_or_hands_back_and_another_worker_completes_the_run(tmp_path):
    with redis_server(tmp_path) as redis_url, chroma_server(tmp_path) as (host, port):
        processes = FleetProcesses(redis_url, host, port, tmp_path, timing={})  # production leases: 60 s
        try:
            folder = tmp_path / "docs"
            write_corpus(folder, documents=8)
            big = folder / "handbook.md"  # long enough that its embedding is in hand when the signal comes
            big.write_text("\n\n".join(f"## Part {n}\n\n{os.urandom(4).hex()} {WORDS * 4}" for n in range(120)))
            first = processes.start_worker("first")
            fleet = processes.client("graceful")
            run_id = enqueue_sync(fleet, spec(folder, "docs"), local_target(fleet.settings))
            held = [keys.member(run_id, side, "handbook.md") for side in (DENSE, SPARSE)]
            wait_until(lambda: any(fleet.redis.hget(keys.HOLDERS, m) for m in held), 240, "the embedding to start")

            os.kill(first.pid, signal.SIGTERM)  # the main process only, as a container runtime does
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
            assert not fleet.runs.get(run_id).status.finished, "the run ended before the signal: nothing was tested"

            processes.start_worker("second")
            run = processes.wait_for_run(fleet, run_id, 300)
            assert run.status.value == "complete", run.to_json()
            assert processes.documents("graceful") == {p.name for p in folder.iterdir()}
        finally:
            processes.stop()

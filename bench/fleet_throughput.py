"""Fleet throughput (2 workers) against embedded mode on the same corpus, and per-document queueing overhead.

Starts its own services on loopback: a private redis-server and a `chroma run` server.
1. Embedded: `engine.sync` of the corpus into an embedded Chroma (models loaded beforehand).
2. Fleet: two worker processes (`headwater worker -c 1`, all queues), models warmed by a tiny run
   first, then `sync --fleet` of the same corpus; timed from queueing to the run's completion.
3. Overhead: the same comparison on many tiny documents (one short sentence each), where model
   work is negligible, so (fleet - embedded) / documents is what queueing, payloads and run
   accounting cost per document.
On one small machine the fleet shares the same cores as embedded mode, so it cannot be faster
there; its point is that workers can be added on other machines.

Run: `python -m bench.fleet_throughput [--min-chunks N] [--tiny N]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from time import perf_counter, sleep

ROOT = Path(__file__).resolve().parents[1]


def _embedded(folder: Path, workdir: Path, source_id: str) -> float:
    from connectors.folder import FolderConnector
    from headwater.embedded import open_engine
    from headwater.settings import Settings

    with open_engine(Settings(chroma_path=workdir / f"embedded-{source_id}", collection="bench")) as engine:
        started = perf_counter()
        engine.sync(FolderConnector(source_id, folder))
        return perf_counter() - started


def _fleet_run(env: dict, folder: Path, source_id: str) -> float:
    import redis

    from headwater.fleet.runs import RunStore

    started = perf_counter()
    queued = subprocess.run([sys.executable, "-m", "headwater.cli", "sync", str(folder), "--fleet", "--source-id",
                             source_id], env=env, capture_output=True, text=True, check=True)
    run_id = queued.stdout.split("queued run ")[1].split()[0]
    runs = RunStore(redis.Redis.from_url(env["HEADWATER_REDIS_URL"]))
    while not runs.get(run_id).status.finished:
        sleep(0.2)
    return perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-chunks", type=int, default=400, help="corpus size (stdlib sources, as embedded_sync)")
    parser.add_argument("--tiny", type=int, default=200, help="tiny documents for the overhead measurement")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from bench.embedded_sync import build_corpus
    from tests.services import chroma_server, redis_server

    workdir = Path(tempfile.mkdtemp(prefix="headwater-fleet-bench-"))
    corpus, tiny, warm = workdir / "corpus", workdir / "tiny", workdir / "warm"
    corpus.mkdir()
    _, _, chunks = build_corpus(corpus, args.min_chunks)  # distinct text: no cache can hide model work
    tiny.mkdir()
    for n in range(args.tiny):
        (tiny / f"note-{n:04d}.txt").write_text(f"Note {n}: the nightly sync finished.\n")
    warm.mkdir()
    (warm / "warm.md").write_text("# Warm up\n\nLoads the models in every worker.\n")
    documents = sum(1 for p in corpus.rglob("*") if p.is_file())
    workers: list[subprocess.Popen] = []
    try:
        with redis_server(workdir) as redis_url, chroma_server(workdir) as (host, port):
            env = {**os.environ, "HEADWATER_REDIS_URL": redis_url, "HEADWATER_CHROMA_HOST": host,
                   "HEADWATER_CHROMA_PORT": str(port), "HEADWATER_COLLECTION": "bench"}
            for command in (["worker", "-c", "1"], ["worker", "-c", "1"],
                            ["beat", "--schedule-file", str(workdir / "beat-schedule")]):
                log = open(workdir / f"{command[0]}-{len(workers)}.log", "wb")
                workers.append(subprocess.Popen([sys.executable, "-m", "headwater.cli", *command], env=env,
                                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            _fleet_run(env, warm, "warm")
            embedded_s = _embedded(corpus, workdir, "corpus")
            fleet_s = _fleet_run(env, corpus, "corpus")
            tiny_embedded_s = _embedded(tiny, workdir, "tiny")
            tiny_fleet_s = _fleet_run(env, tiny, "tiny")
    finally:
        for worker in workers:
            os.killpg(worker.pid, signal.SIGTERM)
        for worker in workers:
            worker.wait(timeout=60)
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{os.cpu_count()} CPUs; corpus: {documents} stdlib .py documents, {chunks} chunks")
    print(f"embedded sync:          {embedded_s:7.1f} s  ({documents / embedded_s:.2f} documents/s)")
    print(f"fleet sync (2 workers): {fleet_s:7.1f} s  ({documents / fleet_s:.2f} documents/s); "
          f"fleet / embedded time {fleet_s / embedded_s:.2f}x")
    overhead = (tiny_fleet_s - tiny_embedded_s) / args.tiny * 1000
    print(f"tiny documents ({args.tiny}): embedded {tiny_embedded_s:.1f} s, fleet {tiny_fleet_s:.1f} s; "
          f"queueing overhead {overhead:.0f} ms per document")
    print()
    print("| corpus | embedded | fleet, 2 workers | fleet/embedded | queueing overhead per document |")
    print("|---|---|---|---|---|")
    print(f"| {documents} documents, {chunks} chunks | {embedded_s:.1f} s | {fleet_s:.1f} s | {fleet_s / embedded_s:.2f}x | "
          f"{overhead:.0f} ms |")


if __name__ == "__main__":
    main()

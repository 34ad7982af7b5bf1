"""Fleet throughput (1 and 2 workers) against embedded mode on the same corpus, queueing overhead, capacity model.

Starts its own services on loopback: a private redis-server and a `chroma run` server.
1. Embedded: `engine.sync` of the corpus into an embedded Chroma (models loaded beforehand).
2. Fleet, 2 workers: two worker processes (`headwater worker -c 1`, all queues, one model thread
   each: two processes on two cores), models warmed by a small run first, then `sync --fleet` of
   the same corpus into a collection of its own; timed from queueing to the run's completion.
   Steps 1 and 2 are timed as `--repeat` pairs (3), alternating which mode goes first, with the
   vector cache emptied before each fleet run; the medians and every pair's ratio are printed.
3. Overhead: the same comparison on many tiny documents (one short sentence each), where model
   work is negligible, so (fleet - embedded) / documents is what queueing, payloads and run
   accounting cost per document.
4. Fleet, 1 worker: the same corpus again (another collection, vector cache emptied).
5. Capacity model (bench/capacity_model.py): per-stage costs as the workers recorded them in each
   fleet run predict the other run's documents per second (1 worker from the 2-worker costs and
   the other way round), compared with what was measured.
The load average is printed at start and end: the machine is shared, so compare ratios. CPU
seconds per process (this process, each worker, the beat, Chroma, Redis) and per stage (the
threads that ran it) are printed for each timed run: they say where the time went whatever else
ran on the machine.

Run: `python -m bench.fleet_throughput [--min-chunks N] [--tiny N] [--repeat N]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from time import perf_counter, process_time, sleep

ROOT = Path(__file__).resolve().parents[1]
# Standard-library packages copied, in this order, until the corpus has enough chunks.
PACKAGES = ("email", "json", "http", "logging", "urllib", "xml", "concurrent", "importlib", "asyncio", "unittest")
STAGES = ("fetch", "parse", "dense", "sparse", "write")
_RUN_NAMES = {"embedded": "embedded", "fleet": "fleet, 2 workers", "one": "fleet, 1 worker"}
# Pool layouts the capacity model is printed for: PROCESSES:stage[@speed-up],... per pool.
LAYOUTS = (
    ("4:fetch,parse,dense,sparse,write",),
    ("4:fetch,parse", "2:dense", "2:sparse", "1:write"),
    ("4:fetch,parse", "1:dense@20", "4:sparse", "1:write"),
    ("4:fetch,parse", "2:dense@20", "2:sparse@20", "1:write"),
    ("8:fetch,parse", "2:dense@20", "2:sparse@20", "2:write"),
)


def build_corpus(target: Path, min_chunks: int) -> tuple[int, int]:
    """Copy stdlib .py files until the chunker makes at least `min_chunks` of them; returns (files, chunks)."""
    from headwater.settings import Settings
    from headwater.pipeline.chunk import chunk_document
    from headwater.pipeline.parse import parse_document

    settings = Settings()
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = chunks = 0
    for package in PACKAGES:
        for source in sorted((stdlib / package).rglob("*.py")):
            if "__pycache__" in source.parts or not source.stat().st_size or chunks >= min_chunks:
                continue
            relative = str(source.relative_to(stdlib))
            chunks += len(chunk_document(parse_document(relative, source.read_bytes()), relative, settings))
            destination = target / relative
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, destination)
            files += 1
    return files, chunks


def _embedded(folder: Path, workdir: Path, source_id: str) -> float:
    from connectors.folder import FolderConnector
    from headwater.sync.embedded import open_engine
    from headwater.settings import Settings

    with open_engine(Settings(chroma_path=workdir / f"embedded-{source_id}", collection="bench")) as engine:
        engine.dense.embed(["warm up"]), engine.sparse.encode(["warm up"])  # load both models untimed
        started = perf_counter()
        engine.sync(FolderConnector(source_id, folder))
        return perf_counter() - started


class Fleet:
    """Worker processes and a beat over one Redis and one Chroma server; runs timed from queueing to the end."""

    def __init__(self, env: dict, workdir: Path) -> None:
        from workers.sending import fleet_client
        from headwater.fleet.context import local_target
        from headwater.settings import Settings

        self.env, self.workdir = env, workdir
        # Runs are queued from this process, as `sync --fleet` does, without timing its start.
        self.client = fleet_client(Settings(redis_url=env["HEADWATER_REDIS_URL"], chroma_host=env["HEADWATER_CHROMA_HOST"],
                                            chroma_port=int(env["HEADWATER_CHROMA_PORT"])))
        self.target = local_target(self.client.settings)
        self.redis = self.client.redis
        self.processes: dict[str, subprocess.Popen] = {}

    def start(self, name: str, *command: str) -> None:
        log = open(self.workdir / f"{name}.log", "wb")
        self.processes[name] = subprocess.Popen([sys.executable, "-m", "headwater.cli", *command], env=self.env,
                                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self, name: str) -> None:
        process = self.processes.pop(name)
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=120)

    def stop_all(self) -> None:
        for name in list(self.processes):
            self.stop(name)

    def run(self, folder: Path, source_id: str, collection: str) -> float:
        """Seconds from queueing a full run of `folder` to its completion (stage costs are reset first)."""
        from dataclasses import replace

        from connectors.folder import FolderConnector
        from headwater.fleet.enqueue import enqueue_sync

        self.client.costs.reset()
        spec = FolderConnector(source_id, folder).spec()
        started = perf_counter()
        run_id = enqueue_sync(self.client, spec, replace(self.target, collection=collection))
        # One field read per poll: this process shares the cores with the workers it times.
        while not self.client.runs.status(run_id).finished:
            sleep(0.1)
        elapsed = perf_counter() - started
        run = self.client.runs.get(run_id)
        assert run.status.value == "complete", run.to_json()
        return elapsed

    def stage_seconds(self) -> dict[str, float]:
        return {stage: cost.seconds for stage, cost in self.client.costs.read().items()}

    def stage_cpu_seconds(self) -> dict[str, float]:
        return {stage: cost.cpu_seconds for stage, cost in self.client.costs.read().items()}

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far of this process and of each child process tree, by name."""
        from bench.process_cpu import children_cpu_seconds, command_name

        names = {process.pid: name for name, process in self.processes.items()}
        found = {"bench": process_time()}
        for pid, seconds in children_cpu_seconds().items():
            found[names.get(pid) or command_name(pid)] = found.get(names.get(pid) or command_name(pid), 0.0) + seconds
        return found

    def forget_vectors(self) -> None:
        """Empty the vector cache, so a second run of the same corpus embeds every text again."""
        from headwater.fleet import keys

        for key in self.redis.scan_iter(match=keys.vector_cache("*", "*"), count=1000):
            self.redis.delete(key)


def _cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before.get(name, 0.0) for name in after}


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-chunks", type=int, default=2000, help="corpus size in chunks (stdlib sources)")
    parser.add_argument("--tiny", type=int, default=200, help="tiny documents for the overhead measurement")
    parser.add_argument("--repeat", type=int, default=3,
                        help="timed pairs of embedded and 2-worker runs (one pair moves by several "
                             "per cent between runs)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from bench.capacity_model import Pool, predict
    from tests.services import chroma_server, redis_server

    workdir = Path(tempfile.mkdtemp(prefix="headwater-fleet-bench-"))
    corpus, tiny, warm = workdir / "corpus", workdir / "tiny", workdir / "warm"
    corpus.mkdir()
    documents, chunks = build_corpus(corpus, args.min_chunks)  # distinct text: no cache can hide model work
    tiny.mkdir()
    for n in range(args.tiny):
        (tiny / f"note-{n:04d}.txt").write_text(f"Note {n}: the nightly sync finished.\n")
    warm.mkdir()
    for n in range(8):
        (warm / f"warm-{n}.md").write_text(f"# Warm up {n}\n\nLoads the models in every worker ({n}).\n")
    load_at_start = _load()
    measured: dict[int, tuple[float, dict[str, float]]] = {}
    walls: dict[str, list[float]] = {name: [] for name in _RUN_NAMES.values()}  # timed run -> wall seconds, each time
    cpu: dict[str, list[dict[str, float]]] = {}  # timed run -> process -> CPU seconds, each time
    stage_cpu: dict[int, dict[str, float]] = {}  # workers -> stage -> CPU seconds
    try:
        with redis_server(workdir) as redis_url, chroma_server(workdir) as (host, port):
            env = {**os.environ, "HEADWATER_REDIS_URL": redis_url, "HEADWATER_CHROMA_HOST": host,
                   "HEADWATER_CHROMA_PORT": str(port), "HEADWATER_COLLECTION": "bench",
                   # Two single-process workers share two cores: one model thread each, no oversubscription.
                   "HEADWATER_MODEL_THREADS": "1",
                   # Embedded mode does not consolidate after a sync by default; neither may the fleet
                   # here, or a pass (an LLM on these workers' cores) would be timed as sync work.
                   "HEADWATER_CONSOLIDATE_ON_WRITE": "false"}
            fleet = Fleet(env, workdir)
            try:
                fleet.start("worker-a", "worker", "-c", "1")
                fleet.start("worker-b", "worker", "-c", "1")
                fleet.start("beat", "beat", "--schedule-file", str(workdir / "beat-schedule"))
                fleet.run(warm, "warm", "warm")
                fleet.run(warm, "warm-again", "warm-again")
                for pair in range(args.repeat):
                    # Alternate which mode goes first, so a drift in the machine's speed (another
                    # tenant, a frequency change) falls on both modes alike.
                    for mode in (("embedded", "fleet") if pair % 2 == 0 else ("fleet", "embedded")):
                        before = fleet.cpu()
                        if mode == "embedded":
                            seconds = _embedded(corpus, workdir, f"corpus-{pair}")
                        else:
                            fleet.forget_vectors()  # the previous pair's vectors must not spare this run any work
                            seconds = fleet.run(corpus, f"corpus-{pair}", f"bench-2-{pair}")
                            stage_cpu[2] = fleet.stage_cpu_seconds()
                            measured[2] = (seconds, fleet.stage_seconds())
                        walls[_RUN_NAMES[mode]].append(seconds)
                        cpu.setdefault(_RUN_NAMES[mode], []).append(_cpu_delta(before, fleet.cpu()))
                embedded_s, fleet_s = (statistics.median(walls[name]) for name in ("embedded", "fleet, 2 workers"))
                ratios = [f / e for e, f in zip(walls["embedded"], walls["fleet, 2 workers"])]
                tiny_embedded_s = _embedded(tiny, workdir, "tiny")
                tiny_fleet_s = fleet.run(tiny, "tiny", "bench-tiny")
                tiny_costs = fleet.stage_seconds()
                fleet.stop("worker-b")
                fleet.forget_vectors()
                before = fleet.cpu()
                one_s = fleet.run(corpus, "corpus-1-worker", "bench-1")
                walls["fleet, 1 worker"].append(one_s)
                cpu["fleet, 1 worker"] = [_cpu_delta(before, fleet.cpu())]
                stage_cpu[1] = fleet.stage_cpu_seconds()
                measured[1] = (one_s, fleet.stage_seconds())
            finally:
                fleet.stop_all()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    load_at_end = _load()

    print(f"{os.cpu_count()} CPUs; load average {load_at_start} at start, {load_at_end} at end")
    print(f"corpus: {documents} stdlib .py documents, {chunks} chunks")
    print(f"embedded sync:          {embedded_s:7.1f} s  ({documents / embedded_s:.2f} documents/s)")
    print(f"fleet sync (2 workers): {fleet_s:7.1f} s  ({documents / fleet_s:.2f} documents/s); "
          f"fleet / embedded time {fleet_s / embedded_s:.2f}x")
    print(f"fleet sync (1 worker):  {one_s:7.1f} s  ({documents / one_s:.2f} documents/s)")
    print(f"{args.repeat} pairs (embedded, fleet with 2 workers; alternating which goes first), medians above: "
          + "; ".join(f"{e:.1f} s / {f:.1f} s = {r:.3f}x"
                      for e, f, r in zip(walls["embedded"], walls["fleet, 2 workers"], ratios))
          + f"; median ratio {statistics.median(ratios):.3f}x, worst {max(ratios):.3f}x")
    overhead = (tiny_fleet_s - tiny_embedded_s) / args.tiny * 1000
    print(f"tiny documents ({args.tiny}): embedded {tiny_embedded_s:.1f} s, fleet {tiny_fleet_s:.1f} s; "
          f"queueing overhead {overhead:.0f} ms per document; worker seconds per tiny document: "
          + ", ".join(f"{stage} {tiny_costs.get(stage, 0.0) / args.tiny * 1000:.1f} ms" for stage in STAGES))
    print()
    print("| corpus | embedded | fleet, 2 workers | fleet/embedded | fleet, 1 worker | queueing overhead per document |")
    print("|---|---|---|---|---|---|")
    print(f"| {documents} documents, {chunks} chunks | {embedded_s:.1f} s | {fleet_s:.1f} s | {fleet_s / embedded_s:.2f}x | "
          f"{one_s:.1f} s | {overhead:.0f} ms ({args.tiny} one-line documents: {tiny_embedded_s:.1f} s embedded, "
          f"{tiny_fleet_s:.1f} s fleet) |")
    print()
    processes = ("bench", "worker-a", "worker-b", "beat", "chroma", "redis-server")
    print("CPU seconds per process in each timed run (`bench` is this process: the embedded sync itself, "
          "or queueing and polling a fleet run):")
    print("| run | wall | " + " | ".join(processes) + " | all |")
    print("|---|---|" + "---|" * (len(processes) + 1))
    for run, each in cpu.items():
        for n, seconds in enumerate(each):
            print(f"| {run}{f' ({n + 1})' if len(each) > 1 else ''} | {walls[run][n]:.1f} | "
                  + " | ".join(f"{seconds.get(p, 0.0):.1f}" for p in processes) + f" | {sum(seconds.values()):.1f} |")
    print()
    print("Per-stage CPU seconds (the threads that ran each stage) against wall seconds:")
    print("| run | " + " | ".join(STAGES) + " |")
    print("|---|" + "---|" * len(STAGES))
    for workers in sorted(stage_cpu):
        print(f"| {workers} worker{'s' if workers > 1 else ''} | " + " | ".join(
            f"{stage_cpu[workers].get(s, 0.0):.1f} / {measured[workers][1].get(s, 0.0):.1f}" for s in STAGES) + " |")
    print()
    print("Per-stage costs, seconds per document (worker wall time / documents), as recorded in each run:")
    print("| run | " + " | ".join(STAGES) + " | sum |")
    print("|---|" + "---|" * (len(STAGES) + 1))
    per_document = {}
    for workers, (_, seconds) in sorted(measured.items()):
        per_document[workers] = {stage: seconds.get(stage, 0.0) / documents for stage in STAGES}
        print(f"| {workers} worker{'s' if workers > 1 else ''} | "
              + " | ".join(f"{per_document[workers][s]:.3f}" for s in STAGES)
              + f" | {sum(per_document[workers].values()):.3f} |")
    print()
    print("| run | predicted from its own stage costs | from the other run's costs | measured | "
          "measured / predicted (own, other) |")
    print("|---|---|---|---|---|")
    for workers, other in ((1, 2), (2, 1)):
        own = predict(per_document[workers], [Pool.all_queues(workers)]).documents_per_second
        cross = predict(per_document[other], [Pool.all_queues(workers)]).documents_per_second
        actual = documents / measured[workers][0]
        print(f"| {workers} worker{'s' if workers > 1 else ''}, all queues | {own:.3f} documents/s | {cross:.3f} | "
              f"{actual:.3f} | {actual / own:.2f}, {actual / cross:.2f} |")
    print()
    print("Layouts, from the 1-worker run's stage costs (one process per core; a speed-up is assumed, not measured):")
    print("| pools | documents/s | bounded by |")
    print("|---|---|---|")
    for layout in LAYOUTS:
        prediction = predict(per_document[1], [Pool.parse(p) for p in layout])
        print(f"| {'; '.join(layout)} | {prediction.documents_per_second:.2f} | "
              f"{prediction.bound.label()}: {prediction.bounding_stage} |")


if __name__ == "__main__":
    main()

"""`headwater query` as a user runs it: wall and CPU time from process start to output, per mode.

Corpus: standard-library packages of the running interpreter (their `.py` files), added package
by package until about 3,000 chunks' worth, synced once with `headwater sync` into an embedded
Chroma. Then each round runs the real console script once per mode (hybrid, dense) and, with
`--baseline DIR`, the same commands against another checkout of the code (e.g. the commit before
this change: `git archive <commit> | tar -x -C DIR`), so both see the same load. Every run is a
fresh process: imports, model loading, Chroma and the sparse index opening are all included.

Run: ``python -m bench.query_latency [--runs 10] [--baseline DIR] [--store DIR] [--keep]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from time import perf_counter

from bench.stdlib_corpus import copy_packages

# Enough source for ~3,000 chunks (about 670 chunks per 0.43 MB of stdlib source, measured).
TARGET_BYTES = 1_900_000
PACKAGES = ("asyncio", "email", "json", "logging", "http", "urllib", "xml", "concurrent", "importlib", "unittest",
            "multiprocessing", "sqlite3", "collections", "tomllib", "zoneinfo")
QUERIES = ("run blocking code in a thread from a coroutine", "parse an email header with an encoded word",
           "rotate log files when they grow too large", "decode JSON into custom objects")
MODES = ("hybrid", "dense")


def timed(command: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the child, stdout) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = perf_counter()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    wall = perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, result.stdout


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per mode (and per code version)")
    parser.add_argument("--baseline", type=Path, help="another checkout of the code to time in the same rounds")
    parser.add_argument("--store", type=Path, help="reuse (or create) the synced corpus here")
    parser.add_argument("--keep", action="store_true", help="leave the corpus and Chroma directory in place")
    args = parser.parse_args()

    work = args.store or Path(tempfile.mkdtemp(prefix="headwater-query-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    headwater = str(Path(sys.executable).with_name("headwater"))
    env = {**os.environ, "COLUMNS": "200"}
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average at start {os.getloadavg()}")
    if not (work / "store").is_dir():
        files, size = copy_packages(work / "corpus", PACKAGES, TARGET_BYTES)
        # Embedding ~3,000 chunks takes minutes, many more on a busy machine.
        wall, cpu, _ = timed([headwater, "sync", "corpus", "--chroma-path", "store", "--source-id", "stdlib"], work, env,
                             timeout=4 * 3600)
        print(f"synced {files} files ({size / 1e6:.2f} MB) in {wall:.0f} s (CPU {cpu:.0f} s)")
    status = json.loads(timed([headwater, "status", "--chroma-path", "store", "--json"], work, env)[2])
    print(f"collection: {status['stdlib']['chunks']} chunks of {status['stdlib']['documents']} documents")

    versions = {"this checkout": env}
    if args.baseline:
        versions[f"baseline {args.baseline}"] = {**env, "PYTHONPATH": str(args.baseline.resolve())}
    figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for round_number in range(args.runs + 1):  # round 0 warms the page cache and is not counted
        for mode in MODES:
            for version, version_env in versions.items():
                query = QUERIES[round_number % len(QUERIES)]
                wall, cpu, out = timed([headwater, "query", query, "--chroma-path", "store", "--mode", mode, "--json"],
                                       work, version_env)
                if not json.loads(out):
                    raise SystemExit(f"{version} {mode}: no results for {query!r}")
                if round_number:
                    figures.setdefault((version, mode), []).append((wall, cpu))

    print(f"\n{args.runs} runs each, `headwater query TEXT --mode MODE --json`, process start to output")
    print(f"{'code':<40} {'mode':<7} {'wall p50':>9} {'wall p95':>9} {'CPU p50':>8} {'CPU p95':>8}")
    for (version, mode), runs in figures.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        print(f"{version:<40} {mode:<7} {statistics.median(walls):8.2f}s {percentile(walls, 0.95):8.2f}s "
              f"{statistics.median(cpus):7.2f}s {percentile(cpus, 0.95):7.2f}s")
    print(f"load average at end {os.getloadavg()}")
    if args.keep or args.store:
        print(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

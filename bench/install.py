"""The two installs, timed on a fresh clone: the quickstart with an empty and a warm pip cache, and the test install.

For each: wall time, the virtualenv's size, whether any compiler ran (the quickstart runs with
cc, gcc, g++, c++, clang and cmake on PATH replaced by stubs that record the call and fail), and
whether any installed package is one that pulls CUDA on a normal Linux machine (torch, nvidia-*,
triton, ...). The quickstart is then used as a newcomer would: `headwater sync examples/docs`
and one `headwater query`.

Runs, in order, each into its own virtualenv in one fresh clone of this repository's HEAD (commit
first; uncommitted changes are not in the clone):

1. quickstart, empty cache: `scripts/install.sh` with PIP_CACHE_DIR a new, empty directory and pip
   configured as on this machine. NOTE: this machine's pip configuration (/etc/pip.conf, PIP_FIND_LINKS,
   /etc/xdg/pip) adds local wheel directories (/opt/wheels, /opt/pypi, /opt/pypi-more) that pip reads
   like an index, so "empty cache" still copies most wheels from local disk instead of downloading them.
2. quickstart, empty cache, PyPI only (--pypi-too): the same with every pip configuration file and
   PIP_FIND_LINKS ignored, so every wheel comes from pypi.org as on a newcomer's machine.
3. quickstart, warm cache: the same cache as run 1, now filled, into a new virtualenv.
4. test install (unless --no-test-install): `scripts/install.sh --test` with pip's usual cache, which
   holds the llama-cpp-python wheel built before (a first build takes ~10 minutes on two cores and is
   not timed here).
5. the test suite (with --suite): the README's test command, `python -m pytest`, in the test install,
   with CI=true as .ci/run runs it (about half an hour on two cores).

Targets (issue 40): quickstart cold <= 300 s, warm <= 90 s, virtualenv <= 1.2 GB, no compiler, no
CUDA-pulling package.

Run (minutes; it installs several hundred MB): python -m bench.install [--pypi-too] [--suite]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMPILERS = ("cc", "gcc", "g++", "c++", "clang", "clang++", "cmake", "ninja")
# Distributions that are, or pull, the CUDA stack from the package registry on Linux x86-64.
CUDA_PULLING = ("torch", "torchvision", "torchaudio", "triton", "tensorflow", "jax", "jaxlib", "cupy", "onnxruntime-gpu")
TARGETS = {"cold_s": 300, "warm_s": 90, "venv_gb": 1.2}
QUESTION = "how do I rotate the chroma token"


def compiler_stubs(directory: Path, calls: Path) -> None:
    """Stubs named like every compiler and build tool: each records how it was called, then fails."""
    directory.mkdir(parents=True)
    for name in COMPILERS:
        stub = directory / name
        stub.write_text(f"#!/bin/sh\necho \"{name} $*\" >> {calls}\nexit 1\n")
        stub.chmod(0o755)


def install(clone: Path, venv: str, env: dict[str, str], *flags: str) -> dict:
    """Run scripts/install.sh; its wall time, exit status and output (kept next to the clone)."""
    log = clone.parent / f"install-{venv.strip('.')}.log"
    started = time.perf_counter()
    with open(log, "w") as out:
        done = subprocess.run(["scripts/install.sh", *flags, venv], cwd=clone, env=env, stdout=out,
                              stderr=subprocess.STDOUT, timeout=3600)
    return {"seconds": time.perf_counter() - started, "rc": done.returncode, "log": str(log)}


def venv_bytes(venv: Path) -> int:
    """Disk used by the virtualenv (du), bytes."""
    return int(subprocess.run(["du", "-s", "--block-size=1", str(venv)], capture_output=True, text=True,
                              check=True).stdout.split()[0])


def packages(venv: Path) -> list[tuple[str, int, list[str]]]:
    """(name, bytes on disk, declared requirements) of every installed distribution, largest first."""
    script = r"""
import json, os
from importlib.metadata import distributions
rows = []
for dist in distributions():
    size = 0
    for file in dist.files or ():
        try:
            size += os.path.getsize(dist.locate_file(file))
        except OSError:
            pass
    rows.append((dist.metadata["Name"], size, dist.requires or []))
print(json.dumps(rows))
"""
    shown = subprocess.run([str(venv / "bin" / "python"), "-c", script], capture_output=True, text=True, check=True)
    return sorted((tuple(row) for row in json.loads(shown.stdout)), key=lambda row: -row[1])


def cuda_pulling(rows: list) -> tuple[list[str], list[str]]:
    """Installed distributions that pull CUDA, and installed ones that declare such a requirement (--no-deps installs)."""
    def pulls(name: str) -> bool:
        name = name.lower().replace("_", "-")
        return name in CUDA_PULLING or name.startswith(("nvidia-", "cupy-"))

    installed = [name for name, _, _ in rows if pulls(name)]
    declaring = [name for name, _, requires in rows
                 if any(pulls(re.match(r"[A-Za-z0-9_.-]+", r).group()) and "extra ==" not in r for r in requires)]
    return installed, declaring


def use_quickstart(clone: Path, venv: str, env: dict[str, str]) -> dict:
    """What the README's tour does first: sync the sample folder, ask it a question.

    The quickstart installs without byte-compiling (pip --no-compile), so Python writes the bytecode of
    what Headwater imports on first use, as on a newcomer's machine (PYTHONDONTWRITEBYTECODE, set on
    some machines, is unset here): the virtualenv's size is measured again afterwards.
    """
    headwater = str(clone / venv / "bin" / "headwater")
    store = str(clone.parent / f"chroma{venv}")
    env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    started = time.perf_counter()
    synced = subprocess.run([headwater, "sync", "examples/docs", "--chroma-path", store], cwd=clone,
                            capture_output=True, text=True, timeout=900, env=env)
    sync_s = time.perf_counter() - started
    found = subprocess.run([headwater, "query", QUESTION, "-k", "1", "--json", "--chroma-path", store], cwd=clone,
                           capture_output=True, text=True, timeout=300, env=env)
    top = json.loads(found.stdout)[0]["uri"] if found.returncode == 0 else f"query failed: {found.stderr[-300:]}"
    return {"sync_rc": synced.returncode, "sync_s": sync_s, "top_hit": top, "bytes_after": venv_bytes(clone / venv)}


def report(name: str, run: dict, venv: Path, calls: Path | None) -> dict:
    rows = packages(venv) if run["rc"] == 0 else []
    installed, declaring = cuda_pulling(rows)
    compilers = calls.read_text().splitlines() if calls and calls.exists() else []
    size = venv_bytes(venv) if venv.exists() else 0
    print(f"\n{name}: {run['seconds']:.0f} s, exit {run['rc']}, virtualenv {size / 1e9:.2f} GB, {len(rows)} distributions")
    if calls is not None:
        print(f"  compiler calls: {len(compilers)}" + (f" (first: {compilers[0]})" if compilers else ""))
    print(f"  CUDA-pulling packages installed: {installed or 'none'}")
    if declaring:
        print(f"  installed --no-deps though they declare such a requirement (nothing pulled): {', '.join(declaring)}")
    print("  largest: " + ", ".join(f"{n} {s / 1e6:.0f} MB" for n, s, _ in rows[:10]))
    if run["rc"]:
        print(f"  FAILED: see {run['log']}")
    return {"seconds": run["seconds"], "rc": run["rc"], "bytes": size, "compilers": len(compilers), "cuda": installed}


def run_suite(clone: Path, venv: str, env: dict[str, str]) -> dict:
    """The README's test command (`python -m pytest`) in the clone, as CI runs it: seconds, exit, pytest's verdict."""
    started = time.monotonic()
    done = subprocess.run([str(clone / venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                          cwd=clone, env={**env, "CI": "true"}, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return {"seconds": time.monotonic() - started, "rc": done.returncode, "summary": lines[-1] if lines else done.stderr[-300:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pypi-too", action="store_true", help="also time a cold quickstart from pypi.org only")
    parser.add_argument("--no-test-install", action="store_true", help="skip the test install")
    parser.add_argument("--keep", action="store_true", help="leave the clone and its virtualenvs in place")
    parser.add_argument("--suite", action="store_true",
                        help="after the test install, run the README's test command in the clone and time it (~30 min)")
    args = parser.parse_args()
    if args.suite and args.no_test_install:
        parser.error("--suite runs the tests in the test install: drop --no-test-install")

    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    print(f"headwater {head}, {os.cpu_count()} CPUs, load average at start {os.getloadavg()}")
    work = Path(tempfile.mkdtemp(prefix="bench-install-"))
    clone = work / "headwater"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PIP_CACHE_DIR"))}
    base.pop("PYTHONPATH", None)
    results = {}
    try:
        stubs, calls = work / "stubs", work / "compiler-calls.txt"
        compiler_stubs(stubs, calls)
        quick = {**base, "PATH": f"{stubs}:{base['PATH']}", "CC": str(stubs / "cc"), "CXX": str(stubs / "c++"),
                 "PIP_CACHE_DIR": str(work / "pip-cache")}
        run = install(clone, ".venv", quick)
        results["cold"] = report("quickstart, empty pip cache (local wheel directories as configured here)", run,
                                 clone / ".venv", calls)
        if run["rc"] == 0:
            results["use"] = use = use_quickstart(clone, ".venv", quick)
            print(f"  sync examples/docs: exit {use['sync_rc']} in {use['sync_s']:.0f} s; "
                  f"query {QUESTION!r} -> {use['top_hit']}")
            print(f"  virtualenv after that first use (bytecode of what ran cached): {use['bytes_after'] / 1e9:.2f} GB")
        if args.pypi_too:
            calls_pypi = work / "compiler-calls-pypi.txt"
            stubs_pypi = work / "stubs-pypi"
            compiler_stubs(stubs_pypi, calls_pypi)
            pypi = {k: v for k, v in quick.items() if not k.startswith("PIP_")}
            pypi.update({"PIP_CONFIG_FILE": os.devnull, "PIP_CACHE_DIR": str(work / "pip-cache-pypi"),
                         "PATH": f"{stubs_pypi}:{base['PATH']}", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                         "PIP_DEFAULT_TIMEOUT": "180"})
            if "PIP_CERT" in os.environ:
                pypi["PIP_CERT"] = os.environ["PIP_CERT"]
            results["cold_pypi"] = report("quickstart, empty pip cache, pypi.org only",
                                          install(clone, ".venv-pypi", pypi), clone / ".venv-pypi", calls_pypi)
        calls.unlink(missing_ok=True)
        results["warm"] = report("quickstart, warm pip cache", install(clone, ".venv-warm", quick),
                                 clone / ".venv-warm", calls)
        if not args.no_test_install:
            results["test"] = report("test install (scripts/install.sh --test), pip's usual cache",
                                     install(clone, ".venv-test", base, "--test"), clone / ".venv-test", None)
            if args.suite and results["test"]["rc"] == 0:
                results["suite"] = suite = run_suite(clone, ".venv-test", base)
                print(f"\ntest suite: {suite['seconds']:.0f} s, exit {suite['rc']}: {suite['summary']}")
    finally:
        if args.keep:
            print(f"\nkept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    print("\nagainst the targets:")
    cold, warm = results.get("cold"), results.get("warm")
    if cold:
        print(f"  quickstart cold {cold['seconds']:.0f} s (target <= {TARGETS['cold_s']} s)"
              + (f"; from pypi.org only {results['cold_pypi']['seconds']:.0f} s" if "cold_pypi" in results else ""))
        print(f"  quickstart virtualenv {cold['bytes'] / 1e9:.2f} GB (target <= {TARGETS['venv_gb']} GB)"
              + (f"; {results['use']['bytes_after'] / 1e9:.2f} GB after the first sync and query" if "use" in results else ""))
        print(f"  compiler calls {cold['compilers']} (target 0); CUDA-pulling packages {cold['cuda'] or 'none'} (target none)")
    if warm:
        print(f"  quickstart warm {warm['seconds']:.0f} s (target <= {TARGETS['warm_s']} s)")
    if "test" in results:
        print(f"  test install {results['test']['seconds']:.0f} s, virtualenv {results['test']['bytes'] / 1e9:.2f} GB")
    if "suite" in results:
        print(f"  test suite {results['suite']['seconds'] / 60:.1f} min: {results['suite']['summary']}")
    print(f"load average at end {os.getloadavg()}")
    sys.exit(0 if all(r["rc"] == 0 for r in results.values() if "rc" in r) else 1)


if __name__ == "__main__":
    main()

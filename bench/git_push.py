"""Push-to-searchable latency of git sources: one-file pushes delivered as signed GitHub webhooks.

A bare repository on disk (fetched by file:// URL) holds a small handbook; `headwater serve` follows
it (embedded mode, and with --fleet also fleet mode: a worker and a beat over a private Redis and a
`chroma run`). Each round commits a one-file change carrying a phrase no other file has, pushes it,
then delivers the push webhook exactly as GitHub would (signed) and polls the search API until the
changed file comes back from a dense search filtered to the pushed commit (`where: {"commit": ...}`)
— searchable, with its new content. The clock starts when the webhook is sent (the push itself
happens before GitHub sends anything). Also reports how long the webhook took to be answered.

Run: ``python -m bench.git_push [--rounds 15] [--fleet] [--flush-delay SECONDS] [--keep]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
from pathlib import Path
from time import perf_counter, sleep

from tests.git_repos import Repository, delivery, push_payload

SECRET = "bench-webhook-secret"
TOPICS = ("rotating the Chroma token", "restoring a backup", "onboarding a new engineer", "tuning the SPLADE encoder",
          "scheduling reconciliation runs", "reading the run history", "deploying the worker fleet")


def seed(repo: Repository, files: int) -> None:
    for i in range(files):
        topic = TOPICS[i % len(TOPICS)]
        repo.write(f"docs/note-{i:03}.md", f"# Note {i}: {topic}\n\nThis page explains {topic} step by step.\n")
    repo.commit_and_push("seed")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def measure(serve, repo: Repository, rounds: int, poll: float, first: int = 0) -> tuple[list[float], list[float]]:
    """(push-to-searchable seconds, webhook answer seconds) per one-file push (round numbers from `first`)."""
    latencies, answers = [], []
    for i in range(first, first + rounds):
        phrase = f"the quarterly failover drill number {i} uses the amber runbook"
        repo.write(f"docs/note-{i % 7:03}.md", f"# Drill {i}\n\nRemember: {phrase}.\n")
        before, after = repo.commit_and_push(f"drill {i}")
        body, headers = delivery(push_payload(repo, before, after), SECRET)
        started = perf_counter()
        response = serve.anonymous.post("/webhooks/github", content=body, headers=headers)
        answers.append(perf_counter() - started)
        if response.status_code != 202:
            raise SystemExit(f"webhook answered {response.status_code}: {response.text}")
        params = {"q": phrase, "k": 1, "mode": "dense", "source_id": "bench", "where": json.dumps({"commit": after})}
        while True:
            hits = _hits(serve, params)
            if hits and hits[0]["uri"] == f"docs/note-{i % 7:03}.md":
                break
            if perf_counter() - started > 120:
                raise SystemExit(f"push {i} was not searchable within 120 s; see {serve.log_path}")
            sleep(poll)
        latencies.append(perf_counter() - started)
    return latencies, answers


def _hits(serve, params: dict) -> list[dict]:
    """Search results, or none while the collection does not exist yet (a 409)."""
    response = serve.api.get("/api/v1/search", params=params)
    return response.json() if response.status_code == 200 else []


def run_mode(mode: str, work: Path, args: argparse.Namespace) -> dict:
    from tests.integration.http_harness import ServeProcess

    repo = Repository(work / "remotes", "handbook")
    seed(repo, args.files)
    (work / "headwater.toml").write_text(
        f'[[sources]]\nid = "bench"\nkind = "git"\noptions = {{ url = "{repo.url}", branch = "main", '
        f'webhook_secret_env = "BENCH_HOOK_SECRET" }}\n', encoding="utf-8")
    env = {"HEADWATER_CONFIG_FILE": str(work / "headwater.toml"), "HEADWATER_GIT_CACHE_DIR": str(work / "git-cache"),
           "BENCH_HOOK_SECRET": SECRET, "HEADWATER_CHROMA_PATH": str(work / "chroma")}
    fleet = None
    with _services(mode, work) as services:
        if services is not None:
            from tests.integration.fleet_harness import FleetProcesses

            redis_url, host, port = services
            timing = {"HEADWATER_FLUSH_DELAY_SECONDS": str(args.flush_delay)} if args.flush_delay else {}
            fleet = FleetProcesses(redis_url, host, port, work, timing=timing)
            fleet.env["HEADWATER_GIT_CACHE_DIR"] = str(work / "worker-git-cache")
            fleet.start_fleet()
            env.update({k: v for k, v in fleet.env.items() if k.startswith("HEADWATER_")})
            env["HEADWATER_DATABASE_URL"] = f"sqlite:///{work / 'sources.sqlite3'}"
        serve = ServeProcess(work, env, name=f"serve-{mode}")
        try:
            serve.start()
            first = repo.head()
            body, headers = delivery(push_payload(repo, "0" * 40, first), SECRET)
            serve.anonymous.post("/webhooks/github", content=body, headers=headers).raise_for_status()
            params = {"q": "tuning the SPLADE encoder", "k": 1, "mode": "dense", "where": json.dumps({"commit": first})}
            deadline = perf_counter() + 300
            while not _hits(serve, params):  # the first sync (full)
                if perf_counter() > deadline:
                    raise SystemExit(f"the first sync did not finish; see {serve.log_path}")
                sleep(0.5)
            measure(serve, repo, 2, args.poll)  # warm-up: models loaded, searcher open
            latencies, answers = measure(serve, repo, args.rounds, args.poll, first=2)
        finally:
            serve.stop()
            if fleet is not None:
                fleet.stop()
    return {"mode": mode, "rounds": len(latencies), "p50": statistics.median(latencies),
            "p95": percentile(latencies, 0.95), "max": max(latencies),
            "answer_p50_ms": 1000 * statistics.median(answers), "answer_p95_ms": 1000 * percentile(answers, 0.95)}


class _services:
    """Redis and `chroma run` for fleet mode; nothing for embedded."""

    def __init__(self, mode: str, work: Path) -> None:
        self.mode, self.work = mode, work

    def __enter__(self):  # noqa: ANN204
        if self.mode != "fleet":
            return None
        from contextlib import ExitStack

        from tests.services import chroma_server, redis_server

        self.stack = ExitStack()
        redis_url = self.stack.enter_context(redis_server(self.work))
        host, port = self.stack.enter_context(chroma_server(self.work))
        return redis_url, host, port

    def __exit__(self, *exc: object) -> None:
        if self.mode == "fleet":
            self.stack.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="one-file pushes measured per mode")
    parser.add_argument("--files", type=int, default=40, help="files in the repository")
    parser.add_argument("--fleet", action="store_true", help="also measure fleet mode (worker, beat, Redis, chroma run)")
    parser.add_argument("--flush-delay", type=float, default=0.0,
                        help="fleet: HEADWATER_FLUSH_DELAY_SECONDS for the worker (0: the default)")
    parser.add_argument("--poll", type=float, default=0.1, help="seconds between search polls")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="headwater-git-push-"))
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    results = []
    try:
        for mode in ("embedded", *(("fleet",) if args.fleet else ())):
            (work / mode).mkdir()
            results.append(run_mode(mode, work / mode, args))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'mode':<10}{'pushes':>7}{'p50 s':>8}{'p95 s':>8}{'max s':>8}{'webhook p50 ms':>16}{'p95 ms':>8}")
    for r in results:
        print(f"{r['mode']:<10}{r['rounds']:>7}{r['p50']:>8.2f}{r['p95']:>8.2f}{r['max']:>8.2f}"
              f"{r['answer_p50_ms']:>16.1f}{r['answer_p95_ms']:>8.1f}")


if __name__ == "__main__":
    main()

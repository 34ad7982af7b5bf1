"""S3 event-to-searchable latency: an object is put, and the time until a query finds it, with an idle consumer.

Starts its own services on loopback: moto's server (S3 and SQS; bucket notifications to a queue),
and for the fleet a private redis-server, a `chroma run` server and one worker process.

1. Embedded: what `headwater watch s3://BUCKET/PREFIX --queue-url URL` runs (a full pass, then the
   SQS consumer applying each batch of events in-process through the engine), in this process, with
   a searcher over the same collection (as `headwater serve` holds one).
2. Fleet: `headwater watch s3://... --fleet --queue-url URL` as its own process (it only enqueues),
   one `headwater worker`, and a searcher in this process following the server's write log (as
   `headwater query` against a Chroma server does).

For each of N objects, one at a time (the consumer idle in its long poll when the object is put):
put_object, then search for the object's text, restricted to its key (`--uri-prefix KEY`), every
50 ms until it is found. Reported: p50, p95 and max of put -> found, and what one query costs.
Warm-up objects (models loading) are not counted. The load average is printed at start and end:
the machine is shared, so compare the two modes within one run.

The fleet runs with default settings: documents of live runs are written as soon as they are ready
(they do not wait out HEADWATER_FLUSH_DELAY_SECONDS for company); --flush-delay changes that setting.

Run: `python -m bench.s3_events [--objects 50] [--mode both|embedded|fleet] [--flush-delay SECONDS]`.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from time import perf_counter, sleep

TOPICS = ("rotating the deployment token", "restoring a vector store backup", "onboarding a new engineer",
          "tuning the sparse encoder", "scheduling reconciliation runs", "reading the audit trail")
POLL_SECONDS = 0.05


def body(i: int) -> bytes:
    topic = TOPICS[i % len(TOPICS)]
    return (f"# Runbook {i}: {topic}\n\nThis runbook explains {topic} step by step. It is page {i} of the "
            f"operations handbook; follow it in order and record what you changed.\n").encode()


def setup_bucket(endpoint: str, bucket: str) -> tuple[object, str]:
    import boto3

    kw = {"endpoint_url": endpoint, "region_name": "us-east-1"}
    s3, sqs = boto3.client("s3", **kw), boto3.client("sqs", **kw)
    s3.create_bucket(Bucket=bucket)
    queue_url = sqs.create_queue(QueueName=f"{bucket}-events")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    s3.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration={"QueueConfigurations": [
        {"QueueArn": arn, "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]}]})
    return s3, queue_url


def measure(s3, bucket: str, searcher, source_id: str, first: int, count: int, timeout: float = 120) -> tuple[list[float], list[float]]:
    """Seconds from put to found, and seconds per query, for objects first..first+count-1."""
    from headwater.retrieval.searcher import Filters

    latencies, queries = [], []
    for i in range(first, first + count):
        key = f"runbooks/runbook-{i:03}.md"
        sleep(0.3)  # the consumer is back in its long poll, idle
        started = perf_counter()
        s3.put_object(Bucket=bucket, Key=key, Body=body(i))
        while True:
            asked = perf_counter()
            hits = searcher.search(f"runbook {i} {TOPICS[i % len(TOPICS)]}", k=3,
                                   filters=Filters(source_id=source_id, uri_prefix=key))
            queries.append(perf_counter() - asked)
            if any(hit.uri == key for hit in hits):
                latencies.append(perf_counter() - started)
                break
            if perf_counter() - started > timeout:
                raise RuntimeError(f"{key} was not searchable after {timeout:.0f}s")
            sleep(POLL_SECONDS)
    return latencies, queries


def summary(name: str, latencies: list[float], queries: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    p95 = ordered[max(0, round(0.95 * len(ordered)) - 1)]
    figures = {"p50": statistics.median(ordered), "p95": p95, "max": ordered[-1],
               "query_p50": statistics.median(queries)}
    print(f"{name}: put -> found p50 {figures['p50']:.2f} s, p95 {figures['p95']:.2f} s, max {figures['max']:.2f} s "
          f"over {len(ordered)} objects (one query {figures['query_p50'] * 1000:.0f} ms p50)", flush=True)
    return figures


def embedded(endpoint: str, work: Path, objects: int, warmup: int) -> dict[str, float]:
    from connectors.s3 import S3Connector
    from headwater.sync.embedded import open_engine
    from headwater.retrieval.searcher import Searcher
    from headwater.settings import Settings
    from headwater.sync.watching import run_acknowledged_watch
    from headwater.pipeline.embed_dense import DenseEmbedder
    from headwater.pipeline.embed_sparse import SpladeEncoder

    s3, queue_url = setup_bucket(endpoint, "bench-embedded")
    settings = Settings(chroma_path=work / "chroma", collection="bench", config_file=work / "none.toml")
    connector = S3Connector("bench", "bench-embedded", "runbooks", endpoint_url=endpoint, queue_url=queue_url)
    connector.check()
    stop = threading.Event()
    with open_engine(settings) as engine:
        engine.sync(connector)
        searcher = Searcher(engine.store, DenseEmbedder(settings.dense_model_dir, 1, int8=settings.dense_int8),
                            SpladeEncoder(settings.sparse_model_dir, 1), engine.sparse_index, None)
        watcher = threading.Thread(target=run_acknowledged_watch, args=(engine, connector, stop), daemon=True)
        watcher.start()
        try:
            measure(s3, "bench-embedded", searcher, "bench", 0, warmup)
            return summary("embedded", *measure(s3, "bench-embedded", searcher, "bench", warmup, objects))
        finally:
            stop.set()
            watcher.join(timeout=30)


def fleet(endpoint: str, work: Path, objects: int, warmup: int, flush_delay: float | None) -> dict[str, float]:
    from headwater.retrieval.searcher import open_searcher
    from headwater.settings import Settings
    from tests.services import chroma_server, redis_server

    s3, queue_url = setup_bucket(endpoint, "bench-fleet")
    with redis_server(work) as redis_url, chroma_server(work) as (host, port):
        env = {**os.environ, "HEADWATER_REDIS_URL": redis_url, "HEADWATER_CHROMA_HOST": host,
               "HEADWATER_CHROMA_PORT": str(port), "HEADWATER_COLLECTION": "bench", "AWS_ENDPOINT_URL": endpoint,
               "HEADWATER_CONFIG_FILE": str(work / "none.toml"),
               # One worker serves every queue here; a consolidation pass (its own pool in infra/)
               # would hold it and be timed as event latency.
               "HEADWATER_CONSOLIDATE_ON_WRITE": "false"}
        if flush_delay is not None:
            env["HEADWATER_FLUSH_DELAY_SECONDS"] = str(flush_delay)
        logs = []

        def start(name: str, *args: str) -> subprocess.Popen:
            log = open(work / f"{name}.log", "ab")
            logs.append(log)
            return subprocess.Popen([sys.executable, "-m", "headwater.cli", *args], env=env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True, cwd=work)

        processes = [start("worker", "worker", "-c", "1"),
                     start("watch", "watch", "s3://bench-fleet/runbooks", "--fleet", "--queue-url", queue_url,
                           "--source-id", "bench")]
        try:
            settings = Settings(redis_url=redis_url, chroma_host=host, chroma_port=port, collection="bench",
                                sparse_index_dir=work / "sparse", config_file=work / "none.toml")
            searcher = _when_collection_exists(lambda: open_searcher(settings), processes)
            measure(s3, "bench-fleet", searcher, "bench", 0, warmup, timeout=300)
            return summary("fleet" if flush_delay is None else f"fleet (flush delay {flush_delay:g} s)",
                           *measure(s3, "bench-fleet", searcher, "bench", warmup, objects))
        finally:
            for process in processes:
                os.killpg(process.pid, signal.SIGTERM)
            for process in processes:
                process.wait(timeout=60)
            for log in logs:
                log.close()


def _when_collection_exists(open_it, processes: list[subprocess.Popen], seconds: float = 300):  # noqa: ANN001, ANN202
    """The watcher's first (empty) full run creates the collection: wait for it."""
    from headwater.errors import ConfigurationError

    deadline = perf_counter() + seconds
    while True:
        try:
            return open_it()
        except ConfigurationError:
            if perf_counter() > deadline or any(p.poll() is not None for p in processes):
                raise
            sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--mode", choices=("embedded", "fleet", "both"), default="both")
    parser.add_argument("--flush-delay", type=float, default=None,
                        help="fleet: HEADWATER_FLUSH_DELAY_SECONDS for the worker (default: the setting's own)")
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    from tests.services import moto_server

    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores", flush=True)
    with tempfile.TemporaryDirectory(prefix="headwater-s3-bench-") as tmp, moto_server(Path(tmp)) as endpoint:
        work = Path(tmp)
        results = {}
        if args.mode in ("embedded", "both"):
            (work / "embedded").mkdir()
            results["embedded"] = embedded(endpoint, work / "embedded", args.objects, args.warmup)
        if args.mode in ("fleet", "both"):
            (work / "fleet").mkdir()
            results["fleet"] = fleet(endpoint, work / "fleet", args.objects, args.warmup, args.flush_delay)
    if len(results) == 2:
        print(f"fleet / embedded p50: {results['fleet']['p50'] / results['embedded']['p50']:.2f}x")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)


if __name__ == "__main__":
    main()

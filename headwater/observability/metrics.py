"""Prometheus metrics of the pipeline, safe in Celery's prefork pools (prometheus-client multiprocess mode).

A worker's pool children each write their samples to files in one directory
(PROMETHEUS_MULTIPROC_DIR); the worker's main process serves them all, summed, on
HEADWATER_METRICS_PORT, together with the depth of the queues it consumes. `headwater serve`
exposes the same series on /metrics for the work it does in-process (embedded mode), beside its
own (HTTP requests, queue depths, documents per source).

The series, and what they answer:
  headwater_documents_total{stage,outcome}   how many documents left each stage, and how
  headwater_chunks_total{stage,outcome}      chunks embedded (per side) and written
  headwater_stage_seconds{stage}             how long each stage's task takes
  headwater_embed_batch_size{side}           texts per model call: are the models fed full batches?
  headwater_upsert_batch_size                records per Chroma write
  headwater_task_retries_total{task,reason}  retries, by exception class
  headwater_task_failures_total{task,reason} failures, by exception class (or the step's own reason)
  headwater_event_to_searchable_seconds{source_kind}  from a live change's arrival to its chunks written
  headwater_queue_depth{queue}               messages waiting per queue
"""

from __future__ import annotations

import os
import time
from typing import Any

from prometheus_client import Counter, Histogram

# What a step's commit state means for the documents_total outcome label.
_OUTCOME = {"indexed": "indexed", "unchanged": "unchanged", "skipped": "skipped", "failed": "failed",
            "deleted": "deleted"}

DOCUMENTS = Counter("headwater_documents", "Documents that left a stage, by outcome", ["stage", "outcome"])
CHUNKS = Counter("headwater_chunks", "Chunks through a stage, by outcome", ["stage", "outcome"])
STAGE_SECONDS = Histogram("headwater_stage_seconds", "Duration of one stage task", ["stage"],
                          buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600))
EMBED_BATCH = Histogram("headwater_embed_batch_size", "Texts per embedding model call", ["side"],
                        buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024))
UPSERT_BATCH = Histogram("headwater_upsert_batch_size", "Records per Chroma write",
                         buckets=(1, 10, 50, 100, 300, 500, 1000, 2000, 3000, 4000, 5000))
RETRIES = Counter("headwater_task_retries", "Task retries, by reason", ["task", "reason"])
FAILURES = Counter("headwater_task_failures", "Task and document failures, by reason", ["task", "reason"])
EVENT_TO_SEARCHABLE = Histogram(
    "headwater_event_to_searchable_seconds", "From a live change's arrival to its chunks written to Chroma",
    ["source_kind"], buckets=(0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 3600))

_SPEC_KINDS: dict[str, str] = {}  # run id -> source kind (a run's source never changes)


def stage_of_task(task_name: str) -> str:
    """headwater.fetch_document -> fetch; the label Grafana panels group by."""
    from headwater import queues as names

    return {names.LIST_SOURCE: "list", names.FETCH: "fetch", names.PARSE: "parse", names.EMBED_DENSE: "dense",
            names.EMBED_SPARSE: "sparse", names.FLUSH: "write", names.FINISH: "finish",
            names.SWEEP: "sweep"}.get(task_name, task_name.rsplit(".", 1)[-1])


def document_moved(step: str, next_state: str) -> None:
    """A document left `step`: on to another step ("next") or into a terminal state."""
    DOCUMENTS.labels(step, _OUTCOME.get(next_state, "next")).inc()


def embedded(side: str, texts: int) -> None:
    EMBED_BATCH.labels(side).observe(texts)
    CHUNKS.labels(side, "embedded").inc(texts)


def written(operation: str, ids: Any, metadatas: Any, embeddings: Any = None) -> None:
    """A ChromaStore write observer: one call per batch sent to Chroma."""
    if operation == "upsert":
        UPSERT_BATCH.observe(len(ids))
    CHUNKS.labels("write", {"upsert": "written", "update": "updated", "delete": "deleted"}.get(operation, operation)
                  ).inc(len(ids))


def searchable(fleet: Any, run: Any, uri: str) -> None:
    """A document of a live run (an event) is written: how long since its change was observed."""
    if run.kind != "live":
        return
    try:
        since = fleet.runs.change(run.id, uri).observed_at
    except Exception:  # noqa: BLE001  (the change record is gone: the run's creation is close to it)
        since = run.created_at
    kind = _SPEC_KINDS.get(run.id)
    if kind is None:
        try:
            kind = str(fleet.runs.spec(run.id).get("kind", "unknown"))
        except Exception:  # noqa: BLE001  (trimmed run: the latency is still worth counting)
            kind = "unknown"
        if len(_SPEC_KINDS) > 1000:
            _SPEC_KINDS.clear()
        _SPEC_KINDS[run.id] = kind
    EVENT_TO_SEARCHABLE.labels(kind).observe(max(0.0, time.time() - since))


def sync_report(report: Any) -> None:
    """An in-process sync (embedded `headwater serve`) finished: its documents and chunks, as stage "sync"."""
    for outcome, count in (("indexed", report.added + report.updated + report.moved), ("unchanged", report.unchanged),
                           ("deleted", report.deleted), ("skipped", len(report.skipped)), ("failed", len(report.failed))):
        if count:
            DOCUMENTS.labels("sync", outcome).inc(count)
    for outcome, count in (("embedded", report.chunks_embedded), ("reused", report.chunks_reused),
                           ("unchanged", report.chunks_unchanged)):
        if count:
            CHUNKS.labels("sync", outcome).inc(count)
    if report.finished_at:
        STAGE_SECONDS.labels("sync").observe(max(0.0, report.finished_at - report.started_at))


# Multiprocess exposition (the worker's main process) -------------------------------------------

def worker_registry(queues: list[str], redis_url: str) -> Any:
    """What a worker's /metrics serves: every pool process's samples, and the depth of its queues."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    registry.register(QueueDepth(queues, redis_url))
    return registry


class QueueDepth:
    """headwater_queue_depth of the given queues, read from Redis at each scrape (one LLEN each)."""

    def __init__(self, queues: list[str], redis_url: str) -> None:
        self.queues = queues
        self.redis_url = redis_url
        self._client: Any = None

    def collect(self):  # noqa: ANN201
        from prometheus_client.core import GaugeMetricFamily

        import redis

        depth = GaugeMetricFamily("headwater_queue_depth", "Messages waiting per queue", labels=["queue"])
        try:
            self._client = self._client or redis.Redis.from_url(self.redis_url, socket_timeout=2)
            pipe = self._client.pipeline(transaction=False)
            for queue in self.queues:
                pipe.llen(queue)
            for queue, length in zip(self.queues, pipe.execute()):
                depth.add_metric([queue], length)
        except Exception:  # noqa: BLE001  (Redis away: a scrape without depths, not a failed scrape)
            pass
        yield depth


def serve_worker_metrics(port: int, queues: list[str], redis_url: str, host: str = "0.0.0.0") -> Any:
    """Serve the worker's /metrics on `port` from a thread of the main process."""
    from prometheus_client import start_http_server

    server, _ = start_http_server(port, addr=host, registry=worker_registry(queues, redis_url))
    return server


def process_exited(pid: int) -> None:
    """A pool child is gone: its live gauges stop counting (counters and histograms keep their totals)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)

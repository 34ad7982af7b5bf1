"""Samples for the dashboard charts and /metrics: queue depth per stage and documents finished, over time."""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily

log = logging.getLogger("headwater.serve")


class Stats:
    """A background sampler keeping the last hour; summaries (documents per source) are cached here too."""

    def __init__(self, backend: Any, interval: float, keep: int = 720, history: Any | None = None) -> None:
        self.backend = backend
        self.interval = interval
        self.samples: collections.deque[dict[str, Any]] = collections.deque(maxlen=keep)
        self.history = history  # where samples outlive this process (headwater.http.stats_history)
        self.summary: dict[str, dict[str, int]] = {}
        self._summary_at = 0.0
        self._summary_wall = 0.0  # when it was computed, in wall-clock time (runs record theirs so)
        self._stop = threading.Event()
        self.registry = CollectorRegistry()
        self.requests = Counter("headwater_http_requests", "HTTP requests served", ["method", "route", "status"],
                                registry=self.registry)
        self.registry.register(_Collector(self))
        self._thread = threading.Thread(target=self._loop, name="headwater-serve-stats", daemon=True)

    def start(self) -> None:
        if self.history is not None:
            try:
                self.samples.extend(self.history.load())
            except Exception as exc:  # noqa: BLE001  (the charts start empty rather than serve not start)
                log.warning("chart history not loaded: %s", type(exc).__name__)
        self.sample()
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        ticks = 0
        while not self._stop.wait(self.interval):
            self.sample()
            ticks += 1
            if ticks % 6 == 0 and hasattr(self.backend, "periodic"):
                try:
                    self.backend.periodic()
                except Exception as exc:  # noqa: BLE001  (Redis or the database blinked: next time)
                    log.warning("periodic upkeep skipped: %s", type(exc).__name__)

    def sample(self) -> None:
        try:
            queues = self.backend.queues()
            done = self.backend.documents_processed()
        except Exception as exc:  # noqa: BLE001  (a service blinked: skip one sample)
            log.warning("stats sample skipped: %s", type(exc).__name__)
            return
        sample = {"t": time.time(), "queues": {q: v["depth"] for q, v in queues.items()},
                  "workers": {q: len(v["workers"]) for q, v in queues.items()}, "done": done}
        self.samples.append(sample)
        if self.history is not None:
            try:
                self.history.append(sample)
            except Exception as exc:  # noqa: BLE001  (this sample stays in memory; the next one tries again)
                log.warning("chart sample not kept: %s", type(exc).__name__)

    def source_summary(self, max_age: float = 10.0, fresh_after: float | None = None) -> dict[str, dict[str, int]]:
        """Documents and chunks per source, each from the collection it writes (cached; from the manifest, or
        every chunk when it cannot tell). `fresh_after`: a run finished then (a wall-clock time), so counts
        computed before it are stale whatever their age: a page never shows a run's result beside old counts."""
        stale = fresh_after is not None and self._summary_wall <= fresh_after
        if stale or time.monotonic() - self._summary_at > max_age:
            summary: dict[str, dict[str, int]] = {}
            for collection in self.backend.catalog.collections():
                try:
                    counts = self.backend.store_for(collection).source_summary()
                except Exception as exc:  # noqa: BLE001  (no such collection yet: nothing synced into it)
                    log.debug("no source summary of %s: %s", collection, exc)
                    continue
                for source_id, count in counts.items():
                    # A source counts in the collection it writes; leftovers elsewhere are not its documents.
                    if self.backend.catalog.collection_of(source_id) == collection or source_id not in summary:
                        summary[source_id] = count
            self.summary = summary
            self._summary_at, self._summary_wall = time.monotonic(), time.time()
        return self.summary

    def series(self) -> dict[str, Any]:
        """Chart data: documents per minute between samples, and queue depth per stage."""
        points = list(self.samples)
        rate = []
        for before, after in zip(points, points[1:]):
            seconds = max(after["t"] - before["t"], 1e-3)
            rate.append({"t": after["t"], "v": round(max(0, after["done"] - before["done"]) * 60 / seconds, 1)})
        queues = sorted({q for p in points for q in p["queues"]})
        return {"documents_per_minute": rate,
                "queue_depth": {q: [{"t": p["t"], "v": p["queues"].get(q, 0)} for p in points] for q in queues}}


class _Collector:
    def __init__(self, stats: Stats) -> None:
        self.stats = stats

    def collect(self):  # noqa: ANN201
        latest = self.stats.samples[-1] if self.stats.samples else None
        depth = GaugeMetricFamily("headwater_queue_depth", "Messages waiting per queue", labels=["queue"])
        workers = GaugeMetricFamily("headwater_queue_workers", "Workers consuming each queue", labels=["queue"])
        done = GaugeMetricFamily("headwater_documents_processed", "Documents finished by recent runs")
        if latest:
            for queue, value in latest["queues"].items():
                depth.add_metric([queue], value)
                workers.add_metric([queue], latest["workers"].get(queue, 0))
            done.add_metric([], latest["done"])
        docs = GaugeMetricFamily("headwater_source_documents", "Documents indexed per source", labels=["source"])
        chunks = GaugeMetricFamily("headwater_source_chunks", "Chunks indexed per source", labels=["source"])
        for source, counts in self.stats.summary.items():
            docs.add_metric([source], counts["documents"])
            chunks.add_metric([source], counts["chunks"])
        yield from (depth, workers, done, docs, chunks)

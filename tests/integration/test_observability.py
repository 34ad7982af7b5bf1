"""A running fleet is observable: error reports reach a Sentry DSN scrubbed of secrets, and the app and
every worker serve Prometheus metrics of what they did.

The DSN is a tiny HTTP receiver on loopback that keeps every envelope the SDK posts.
"""

from __future__ import annotations

import contextlib
import gzip
import http.server
import json
import threading
import zlib
from pathlib import Path
from urllib.parse import quote, quote_plus

import httpx
import pytest

from headwater.fleet import crash
from headwater.fleet.context import local_target
from headwater.fleet.enqueue import enqueue_changes
from headwater.models import DocumentChange, Op
from tests.integration.fleet_harness import FleetProcesses
from tests.integration.http_harness import TOKEN as SERVE_TOKEN
from tests.integration.http_harness import ServeProcess
from tests.integration.test_fleet import spec, write_corpus
from tests.services import chroma_server, free_port, redis_server, wait_until
from headwater import queues as names
from workers.celery_app import create_app

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

# Secrets the worker knows (settings and environment) and that the failing task carries in its arguments.
ADMIN_TOKEN = "admin-token-9c1f0e7d5b3a"
S3_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
GITHUB_TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
REDIS_PASSWORD = "redis-pass-77f1"
WEBHOOK_SECRET = "whsec-3e8b1c0a9f"
SECRETS = (ADMIN_TOKEN, S3_SECRET, GITHUB_TOKEN, REDIS_PASSWORD, WEBHOOK_SECRET)


class DsnReceiver:
    """Accepts Sentry envelopes on loopback (any project) and keeps their decoded bodies."""

    def __init__(self) -> None:
        self.bodies: list[str] = []
        received = self.bodies

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                encoding = self.headers.get("Content-Encoding", "")
                if encoding == "gzip":
                    raw = gzip.decompress(raw)
                elif encoding == "deflate":
                    raw = zlib.decompress(raw)
                elif encoding == "br":
                    import brotli

                    raw = brotli.decompress(raw)
                received.append(raw.decode("utf-8", "replace"))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.dsn = f"http://publickey@127.0.0.1:{self.server.server_address[1]}/42"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> DsnReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def events(self) -> list[dict]:
        """The error events among the envelopes (an envelope is JSON lines: header, item header, item...)."""
        found = []
        for body in self.bodies:
            lines = body.split("\n")
            for header, payload in zip(lines[1::2], lines[2::2]):
                try:
                    if json.loads(header).get("type") == "event":
                        found.append(json.loads(payload))
                except json.JSONDecodeError:
                    continue
        return found


def _errors(receiver: DsnReceiver, component: str) -> list[dict]:
    """The events of one component (serve, worker) that carry an exception, oldest first."""
    return [e for e in receiver.events() if e.get("exception") and e.get("tags", {}).get("component") == component]


def _series(text: str) -> set[str]:
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}


def _samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples of one series: sorted label pairs -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    return {tuple(sorted(sample.labels.items())): sample.value for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.name == name}


def test_a_failing_task_reports_a_scrubbed_event_and_metrics_cover_a_fleet_sync(tmp_path):
    with DsnReceiver() as receiver, redis_server(tmp_path) as redis_url, contextlib.ExitStack() as chroma:
        host, port = chroma.enter_context(chroma_server(tmp_path))  # stopped early: serve's failing request
        metrics_port = free_port()
        processes = FleetProcesses(redis_url, host, port, tmp_path)
        processes.env.update({
            "HEADWATER_SENTRY_DSN": receiver.dsn, "HEADWATER_SENTRY_ENVIRONMENT": "staging",
            "HEADWATER_ADMIN_TOKEN": ADMIN_TOKEN, "AWS_SECRET_ACCESS_KEY": S3_SECRET,
            "HEADWATER_GITHUB_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "HEADWATER_METRICS_PORT": str(metrics_port), "HEADWATER_LOG_FORMAT": "json"})
        serve = ServeProcess(tmp_path, {"HEADWATER_REDIS_URL": redis_url, "HEADWATER_CHROMA_HOST": host,
                                        "HEADWATER_CHROMA_PORT": str(port), "HEADWATER_COLLECTION": "observed",
                                        "HEADWATER_SENTRY_DSN": receiver.dsn, "HEADWATER_SENTRY_ENVIRONMENT": "staging",
                                        "AWS_SECRET_ACCESS_KEY": S3_SECRET})
        try:
            processes.start_worker("worker")
            serve.start()
            folder = tmp_path / "docs"
            write_corpus(folder, documents=3)
            locked = folder / "locked.md"  # a document that fails: the worker may not read it
            locked.write_text("# Locked\n")
            locked.chmod(0)
            # One document's first fetch fails transiently (an injected RetryableError): it is retried, once.
            processes.client("observed").crash.arm("fetch.after_payload", uri="runbook-2.md", action=crash.FAIL)
            fleet, run_id = processes.queue_sync("observed", folder, "docs")
            assert processes.wait_for_run(fleet, run_id).status.value == "complete_with_errors"
            assert fleet.crash.remaining("fetch.after_payload") <= 0, "the injected fault was never reached"
            (folder / "runbook-0.md").write_text("# Runbook 0\n\nChanged after the full run.\n")
            live = enqueue_changes(fleet, spec(folder, "docs"), local_target(fleet.settings),
                                   [DocumentChange("docs", "runbook-0.md", Op.UPSERT, version="edited")])
            assert processes.wait_for_run(fleet, live).status.value == "complete"

            # A task that fails (one argument too many), carrying secrets in its arguments.
            leaky = (f"redis://:{REDIS_PASSWORD}@redis:6379/0 Bearer {ADMIN_TOKEN} {GITHUB_TOKEN} "
                     f"aws_secret_access_key={S3_SECRET} secret={WEBHOOK_SECRET}")
            create_app(fleet.settings).send_task(names.FETCH, args=[run_id, "runbook-1.md", leaky], queue=names.FETCH_QUEUE)
            wait_until(lambda: _errors(receiver, "worker"), 60, "the worker's error event")

            worker_metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
            app_metrics = serve.api.get("/metrics").text

            # A request that fails inside its route (FastAPI integration): search once the Chroma server
            # is gone, with secrets in its query string and the admin token in its Authorization header.
            found = serve.api.get("/api/v1/search", params={"q": "rotate the deployment token"})
            assert found.status_code == 200 and found.json(), found.text  # the searcher is open, Chroma up
            chroma.close()
            query = f"token {SERVE_TOKEN} {GITHUB_TOKEN} aws_secret_access_key={S3_SECRET}"
            failed = serve.api.get("/api/v1/search", params={"q": query})
            assert failed.status_code == 500, f"{failed.status_code}: {failed.text[:500]}"
            wait_until(lambda: _errors(receiver, "serve"), 60, "serve's error event")
        finally:
            serve.stop()
            processes.stop()

    raw = "\n".join(receiver.bodies)
    for secret in (*SECRETS, SERVE_TOKEN):  # as sent, and as a query string carries it
        for form in {secret, quote(secret, safe=""), quote_plus(secret)}:
            assert form not in raw, "a secret reached the DSN"
    (event,) = _errors(receiver, "worker")[:1]
    assert event["exception"]["values"][-1]["type"] == "TypeError"
    assert "[Filtered]" in raw  # the arguments were sent, with the secrets cut out
    tags = event["tags"]
    assert tags["run_id"] == run_id and tags["document"] == "runbook-1.md" and tags["source_id"] == "docs"
    assert tags["component"] == "worker" and tags["task"] == names.FETCH
    assert event["environment"] == "staging" and event["release"].startswith("headwater@")
    (served,) = _errors(receiver, "serve")[:1]
    assert served["tags"]["component"] == "serve" and served["environment"] == "staging"
    assert served["release"].startswith("headwater@")
    assert served["request"]["url"].endswith("/api/v1/search"), served["request"]
    assert "[Filtered]" in json.dumps(served["request"])  # the request was sent, with its secrets cut out

    worker_series = _series(worker_metrics)
    for name in ("headwater_documents_total", "headwater_chunks_total", "headwater_stage_seconds_bucket",
                 "headwater_embed_batch_size_bucket", "headwater_upsert_batch_size_bucket",
                 "headwater_task_failures_total", "headwater_event_to_searchable_seconds_bucket",
                 "headwater_queue_depth"):
        assert name in worker_series, f"{name} missing from the worker's /metrics"
    assert 'headwater_documents_total{outcome="indexed",stage="write"} 4.0' in worker_metrics
    assert 'headwater_event_to_searchable_seconds_count{source_kind="folder"} 1.0' in worker_metrics
    assert 'headwater_task_failures_total{reason="TypeError",task="fetch"} 1.0' in worker_metrics
    assert 'headwater_task_failures_total{reason="PermanentDocumentError",task="fetch"} 1.0' in worker_metrics
    assert 'headwater_documents_total{outcome="failed",stage="fetch"} 1.0' in worker_metrics
    # The injected transient fault was retried once, under its exception class, and the document got in.
    assert _samples(worker_metrics, "headwater_task_retries_total") \
        .get((("reason", "InjectedFault"), ("task", "fetch"))) == 1.0, "the fetch retry was not counted"
    # Chunks per stage: both embedding sides embedded the same new texts, the write wrote them, and the
    # embed batch histograms (per side) add up to what each side embedded.
    chunks = _samples(worker_metrics, "headwater_chunks_total")
    dense = chunks.get((("outcome", "embedded"), ("stage", "dense")), 0)
    sparse = chunks.get((("outcome", "embedded"), ("stage", "sparse")), 0)
    written = chunks.get((("outcome", "written"), ("stage", "write")), 0)
    assert dense > 0 and dense == sparse, chunks
    assert written >= dense, chunks
    batch_sums = _samples(worker_metrics, "headwater_embed_batch_size_sum")
    batch_counts = _samples(worker_metrics, "headwater_embed_batch_size_count")
    for side, embedded in (("dense", dense), ("sparse", sparse)):
        assert batch_sums.get((("side", side),)) == embedded, batch_sums
        assert batch_counts.get((("side", side),), 0) >= 1, batch_counts
    for queue in names.ALL_QUEUES:
        assert f'headwater_queue_depth{{queue="{queue}"}}' in worker_metrics
        assert f'headwater_queue_depth{{queue="{queue}"}}' in app_metrics
    assert "headwater_http_requests_total" in app_metrics and "headwater_documents_processed" in app_metrics
    # The worker's logs are JSON lines that name what they are about.
    lines = [json.loads(line) for line in (Path(tmp_path) / "worker.log").read_text().splitlines()
             if line.startswith("{")]
    assert any(line.get("run_id") == run_id and line.get("component") == "worker" for line in lines)
    assert not any(secret in (Path(tmp_path) / "worker.log").read_text() for secret in SECRETS)


def test_the_beat_liveness_check_follows_the_running_beat(tmp_path):
    from headwater.observability.beat_alive import alive

    with redis_server(tmp_path) as redis_url:
        processes = FleetProcesses(redis_url, "127.0.0.1", free_port(), tmp_path)
        assert not alive(redis_url)  # no beat yet
        try:
            processes.start_beat()
            wait_until(lambda: alive(redis_url), 60, "the beat to take its lock")
        finally:
            processes.stop()
        wait_until(lambda: not alive(redis_url), 60, "the stopped beat's lock to go")

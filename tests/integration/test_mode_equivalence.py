"""Embedded mode and the fleet, given the same inputs, must leave the same collection and the same report.

One fleet for the module (real Redis, a `chroma run`, one worker process and the beat), one
embedded executor process (tests/integration/embedded_executor.py), one moto server, and per
case a fresh collection on each side. Both executors run without root's DAC override, so an
unreadable file is unreadable to both. Every step runs embedded first, then the fleet, on the
same source state, and compares:

- the report: added, updated, unchanged, moved, deleted, and skipped and failed with their reasons
  (the fleet's run states are read as a report by `fleet_report`);
- the collection: ids, texts, metadata, sparse vectors (decoded, to float tolerance: the two sides
  batch texts differently, and batch shapes move the last bits), dense embeddings to float tolerance.
  Metadata left out: `fetched_at` (a web page's fetch time, per run by definition). Nothing else.

A failing step stops its case with both sides' state in the message. The S3 case has no unreadable
object: moto refuses reads only once IAM is enforced, for every client at once (test_s3.py covers it);
it has objects in GLACIER and DEEP_ARCHIVE that were never restored instead, which no GET can read.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import boto3
import numpy as np
import pytest
from pydantic import SecretStr

from connectors.folder import FolderConnector
from connectors.git import GitConnector
from connectors.s3 import S3Connector
from connectors.web import WebConnector
from headwater.store import chroma_store as ckeys
from headwater.fleet.context import local_target
from headwater.fleet.enqueue import enqueue_changes, enqueue_sync
from headwater.models import DocumentChange, Op, time_sequence
from headwater.store.sparse_codec import decode_sparse
from tests.git_repos import Repository
from tests.integration.fleet_harness import _AS_USER, FleetProcesses
from tests.services import aws_test_credentials, chroma_server, moto_server, redis_server
from tests.web_site import Site, serve

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]
PER_RUN_METADATA = {"fetched_at"}  # when a web page was fetched: differs between any two runs
TOLERANCE = 1e-4


def note(topic: str, revision: int = 0) -> str:
    return f"# {topic.title()}\n\nThis page explains {topic} step by step; revision {revision}.\n"


CORRUPT_PDF = b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog >>\nthis is not a PDF body\n%%EOF\n"
BINARY = bytes(range(256)) * 8


# Services and the two executors, once for the module ------------------------------------------------

class EmbeddedExecutor:
    """The executor process: one request, one answer."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.log = open(root / "embedded.log", "ab")
        self.process = subprocess.Popen([*_AS_USER, sys.executable, "-m", "tests.integration.embedded_executor",
                                         str(root / "embedded")], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.root = root

    def request(self, **request) -> dict:
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, f"the embedded executor exited; see {self.root / 'embedded.log'}"
        answer = json.loads(line)
        assert "error" not in answer, answer["error"]
        return answer

    def stop(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
        self.log.close()


@pytest.fixture(scope="module")
def modes(tmp_path_factory):
    root = tmp_path_factory.mktemp("modes")
    with aws_test_credentials(), moto_server(root) as endpoint, redis_server(root) as redis_url, \
            chroma_server(root) as (host, port):
        fleet = FleetProcesses(redis_url, host, port, root)
        fleet.env["HEADWATER_GIT_CACHE_DIR"] = str(root / "worker-git-cache")
        fleet.start_worker(concurrency=2)
        fleet.start_beat()
        env = {k: v for k, v in fleet.env.items() if not k.startswith("HEADWATER_")}
        embedded = EmbeddedExecutor(root, env)
        try:
            yield Modes(root, fleet, embedded, endpoint)
        finally:
            embedded.stop()
            fleet.stop()


class Modes:
    """Runs one step in both modes and compares what they did."""

    def __init__(self, root: Path, fleet: FleetProcesses, embedded: EmbeddedExecutor, s3_endpoint: str) -> None:
        self.root, self.fleet, self.embedded, self.s3_endpoint = root, fleet, embedded, s3_endpoint
        self.s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")

    def sync(self, collection: str, spec: dict, step: str) -> dict:
        """A full run of the source in each mode; the two must agree. Returns the (one) report."""
        embedded = self.embedded.request(op="sync", collection=collection, spec=spec)
        client = self.fleet.client(collection)
        run = self.fleet.wait_for_run(client, enqueue_sync(client, spec, local_target(client.settings)))
        self.compare(step, embedded, fleet_report(client, run), collection)
        return embedded_report(embedded["report"])

    def apply(self, collection: str, spec: dict, changes: list, step: str) -> dict:
        """Live changes (S3 events) applied in each mode; the two must agree. Returns the (one) report."""
        embedded = self.embedded.request(op="apply", collection=collection, spec=spec,
                                         changes=[c.to_json() for c in changes])
        client = self.fleet.client(collection)
        run_id = enqueue_changes(client, spec, local_target(client.settings), changes)
        assert run_id is not None, f"{step}: the fleet took none of the changes"
        self.compare(step, embedded, fleet_report(client, self.fleet.wait_for_run(client, run_id)), collection)
        return embedded_report(embedded["report"])

    def push(self, collection: str, connector: GitConnector, before: str, after: str, step: str) -> None:
        """A push delivered to each mode (its own cursor store each); the two must agree."""
        from headwater.sync.git_pushes import Push, sync_push_fleet
        from headwater.store.source_cursors import CursorStore

        spec = connector.spec()
        embedded = self.embedded.request(op="push", collection=collection, spec=spec,
                                         push={"before": before, "after": after})
        client = self.fleet.client(collection)
        settings = client.settings.model_copy(update={
            "database_url": SecretStr(f"sqlite:///{self.root / 'fleet-sources.sqlite3'}"), "git_cache_dir": self.root / "serve-git"})
        cursors = CursorStore.from_settings(settings)
        serving = GitConnector(spec["id"], cache_dir=settings.git_cache_dir, **spec["options"])
        run_id = sync_push_fleet(client, local_target(client.settings), serving, cursors,
                                 Push(spec["id"], before, after))
        assert run_id is not None, f"{step}: the fleet queued nothing for the push"
        run = self.fleet.wait_for_run(client, run_id)
        self.compare(step, embedded, fleet_report(client, run), collection)

    def compare(self, step: str, embedded: dict, fleet: dict, collection: str) -> None:
        want = embedded_report(embedded["report"])
        assert fleet == want, f"{step}: the reports differ\n  embedded: {want}\n  fleet:    {fleet}"
        differences = compare_records(embedded["records"], fleet_records(self.fleet, collection))
        assert not differences, f"{step}: the collections differ:\n  " + "\n  ".join(differences[:20])


REPORT_COUNTS = ("added", "updated", "unchanged", "moved", "deleted")


def embedded_report(report: dict) -> dict:
    return {**{name: report[name] for name in REPORT_COUNTS}, "skipped": report["skipped"], "failed": report["failed"]}


def fleet_report(client, run) -> dict:  # noqa: ANN001
    """A finished run as the same report (RunStore.report reads its documents' states and notes)."""
    return embedded_report(client.runs.report(run).to_json())


def fleet_records(fleet: FleetProcesses, collection: str) -> dict:
    from headwater.pipeline.stores import open_store

    store = open_store(fleet.settings(collection), create=False)
    got = store.collection.get(include=["documents", "metadatas", "embeddings"])
    return {i: [d, m, [float(x) for x in e]]
            for i, d, m, e in zip(got["ids"], got["documents"], got["metadatas"], got["embeddings"])}


def compare_records(embedded: dict, fleet: dict) -> list[str]:
    """What differs between two collections' records, one line each (empty: the same)."""
    out = []
    for record_id in sorted(set(embedded) | set(fleet)):
        if record_id not in fleet or record_id not in embedded:
            side = "embedded" if record_id in embedded else "fleet"
            uri = (embedded.get(record_id) or fleet.get(record_id))[1].get("uri")
            out.append(f"{record_id} ({uri}) only in {side}")
            continue
        (text_e, meta_e, dense_e), (text_f, meta_f, dense_f) = embedded[record_id], fleet[record_id]
        uri = meta_e.get("uri")
        if text_e != text_f:
            out.append(f"{record_id} ({uri}): texts differ")
        for key in sorted((set(meta_e) | set(meta_f)) - PER_RUN_METADATA):
            a, b = meta_e.get(key), meta_f.get(key)
            if key == ckeys.SPARSE and a and b:
                (ia, va), (ib, vb) = decode_sparse(a), decode_sparse(b)
                if not (np.array_equal(ia, ib) and np.allclose(va, vb, atol=TOLERANCE)):
                    out.append(f"{record_id} ({uri}): sparse vectors differ")
            elif a != b:
                out.append(f"{record_id} ({uri}): metadata {key}: embedded {a!r}, fleet {b!r}")
        if not np.allclose(dense_e, dense_f, atol=TOLERANCE):
            out.append(f"{record_id} ({uri}): dense embeddings differ")
    return out


# The cases -----------------------------------------------------------------------------------------

def write_tree(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "guide.md").write_text(note("rotating tokens"))
    (folder / "backup.md").write_text(note("backups"))
    (folder / "empty.md").write_text("")
    (folder / "blob.bin").write_bytes(BINARY)
    (folder / "broken.pdf").write_bytes(CORRUPT_PDF)


def test_a_folder(modes: Modes) -> None:
    folder = modes.root / "folder"
    write_tree(folder)
    locked = folder / "locked.md"
    locked.write_text(note("secrets"))
    locked.chmod(0)
    spec = FolderConnector("folder", folder).spec()
    modes.sync("folder-case", spec, "first sync")
    modes.sync("folder-case", spec, "nothing changed")
    (folder / "guide.md").write_text(note("rotating tokens", 1))
    modes.sync("folder-case", spec, "an edit")
    (folder / "backup.md").rename(folder / "backups.md")
    modes.sync("folder-case", spec, "a rename")
    (folder / "guide.md").unlink()
    modes.sync("folder-case", spec, "a delete")


def test_an_s3_prefix(modes: Modes) -> None:
    bucket, s3 = "equivalence", modes.s3
    s3.create_bucket(Bucket=bucket)
    objects = {"guide.md": note("rotating tokens").encode(), "backup.md": note("backups").encode(), "empty.md": b"",
               "blob.bin": BINARY, "broken.pdf": CORRUPT_PDF}
    for name, body in objects.items():
        s3.put_object(Bucket=bucket, Key=f"docs/{name}", Body=body)
    # Archived by a lifecycle rule and never restored: a GET cannot read it, and both modes say why.
    s3.put_object(Bucket=bucket, Key="docs/archived.md", Body=note("archives").encode(), StorageClass="GLACIER")
    s3.put_object(Bucket=bucket, Key="docs/deep.md", Body=note("deep archives").encode(), StorageClass="DEEP_ARCHIVE")
    # Archived, then restored: its restored copy is read as any other object.
    s3.put_object(Bucket=bucket, Key="docs/restored.md", Body=note("restores").encode(), StorageClass="GLACIER")
    s3.restore_object(Bucket=bucket, Key="docs/restored.md", RestoreRequest={"Days": 1})
    spec = S3Connector("s3", bucket, "docs", endpoint_url=modes.s3_endpoint).spec()
    first = modes.sync("s3-case", spec, "first sync")
    assert first["failed"]["docs/archived.md"] == ("stored in GLACIER and not restored; restore it (S3 RestoreObject) "
                                              "or exclude it"), first
    assert first["failed"]["docs/deep.md"].startswith("stored in DEEP_ARCHIVE and not restored"), first
    assert "docs/restored.md" not in first["failed"] and "docs/restored.md" not in first["skipped"], first
    modes.sync("s3-case", spec, "nothing changed")
    s3.put_object(Bucket=bucket, Key="docs/guide.md", Body=note("rotating tokens", 1).encode())
    modes.sync("s3-case", spec, "an edit")
    s3.copy_object(Bucket=bucket, Key="docs/backups.md", CopySource={"Bucket": bucket, "Key": "docs/backup.md"})
    s3.delete_object(Bucket=bucket, Key="docs/backup.md")
    modes.sync("s3-case", spec, "a rename")
    s3.delete_object(Bucket=bucket, Key="docs/guide.md")
    modes.sync("s3-case", spec, "a delete")


def test_s3_events_for_objects_gone_before_they_are_read(modes: Modes) -> None:
    """An event's object deleted before its read (the delete's own event not here yet): skipped with the reason
    in both modes, and an indexed one loses its chunks."""
    bucket, s3 = "gone-before-read", modes.s3
    s3.create_bucket(Bucket=bucket)
    for name in ("guide.md", "backup.md"):
        s3.put_object(Bucket=bucket, Key=f"docs/{name}", Body=note(name).encode())
    spec = S3Connector("s3-gone", bucket, "docs", endpoint_url=modes.s3_endpoint).spec()
    assert modes.sync("s3-gone", spec, "first sync")["added"] == 2
    s3.delete_object(Bucket=bucket, Key="docs/backup.md")
    changes = [DocumentChange("s3-gone", uri, Op.UPSERT, sequence=time_sequence())
               for uri in ("docs/backup.md", "docs/never-there.md")]
    report = modes.apply("s3-gone", spec, changes, "events whose objects are gone")
    assert set(report["skipped"]) == {"docs/backup.md", "docs/never-there.md"}, report
    assert all("removed before it could be read" in reason for reason in report["skipped"].values()), report
    assert {meta["uri"] for _text, meta, _vector in fleet_records(modes.fleet, "s3-gone").values()} == {"docs/guide.md"}


def test_a_git_branch(modes: Modes) -> None:
    repo = Repository(modes.root / "remotes", "handbook")
    repo.write("README.md", note("the handbook"))
    repo.write("docs/backup.md", note("backups"))
    repo.write("docs/onboarding.md", note("onboarding"))
    repo.write("docs/empty.md", "")
    before, after = repo.commit_and_push("first")
    connector = GitConnector("git", repo.url, cache_dir=modes.root / "spec-git")
    modes.push("git-case", connector, before, after, "first push (a full run)")
    repo.write("docs/tuning.md", note("tuning"))
    repo.write("README.md", note("the handbook", 1))
    repo.remove("docs/onboarding.md")
    repo.move("docs/backup.md", "ops/backup.md")
    before, after = repo.commit_and_push("an add, an edit, a delete and a rename")
    modes.push("git-case", connector, before, after, "a push with every kind of change")


def test_a_website(modes: Modes) -> None:
    with serve(Site()) as site:
        site.page("/", '<html><head><title>Home</title></head><body><h1>Home</h1><p>Start here.</p>'
                       '<a href="/guide.html">Guide</a> <a href="/backup.html">Backups</a></body></html>')
        site.page("/guide.html", "<html><head><title>Guide</title></head><body><h1>Guide</h1>"
                                 f"<p>{note('rotating tokens')}</p></body></html>")
        site.page("/backup.html", "<html><head><title>Backups</title></head><body><h1>Backups</h1>"
                                  f"<p>{note('backups')}</p></body></html>")
        spec = WebConnector("web", [site.url("/")], allow_private_addresses=True, delay_seconds=0.0,
                            timeout_seconds=5.0, retries=0).spec()
        modes.sync("web-case", spec, "first crawl")
        modes.sync("web-case", spec, "an unchanged recrawl")
        time.sleep(1.1)  # Last-Modified has one-second resolution
        site.page("/guide.html", "<html><head><title>Guide</title></head><body><h1>Guide</h1>"
                                 f"<p>{note('rotating tokens', 1)}</p></body></html>")
        modes.sync("web-case", spec, "an edited page")
        site.remove("/backup.html")
        modes.sync("web-case", spec, "a removed page")


def html(title: str, text: str, *links: str) -> str:
    anchors = " ".join(f'<a href="{link}">{link}</a>' for link in links)
    return f"<html><head><title>{title}</title></head><body><h1>{title}</h1><p>{text}</p>{anchors}</body></html>"


def test_a_website_within_its_limits(modes: Modes) -> None:
    """Depth and max_pages decide the same pages in both modes, and a crawl max_pages cut short deletes nothing."""
    with serve(Site()) as site:
        # / -> a -> deep (two links from the start URL) and then extra, which max_pages leaves out.
        site.page("/", html("Home", "Start here.", "/a.html"))
        site.page("/a.html", html("Guide", note("rotating tokens"), "/deep.html", "/extra.html"))
        site.page("/deep.html", html("Deep", note("backups"), "/deeper.html"))
        site.page("/extra.html", html("Extra", note("onboarding")))
        site.page("/deeper.html", html("Deeper", note("tuning")))  # three links away: past max_depth
        spec = WebConnector("web-limits", [site.url("/")], allow_private_addresses=True, delay_seconds=0.0,
                            timeout_seconds=5.0, retries=0, max_depth=2, max_pages=3).spec()
        first = modes.sync("web-limits", spec, "a first crawl within max_depth and max_pages")
        assert first["added"] == 3, first
        assert not site.requests("/extra.html") and not site.requests("/deeper.html")

        time.sleep(1.1)  # Last-Modified has one-second resolution
        # A new page ahead of the guide: max_pages now stops the crawl before it reaches deep.html, and
        # a crawl cut short does not delete what it did not reach.
        site.page("/", html("Home", "Start here, with news.", "/news.html", "/a.html"))
        site.page("/news.html", html("News", note("news")))
        cut = modes.sync("web-limits", spec, "a recrawl that max_pages cuts short")
        assert cut["deleted"] == 0 and cut["added"] == 1 and cut["updated"] == 1, cut
        records = fleet_records(modes.fleet, "web-limits")
        assert site.url("/deep.html") in {meta["uri"] for _text, meta, _vector in records.values()}


def test_a_website_with_a_query_trap(modes: Modes) -> None:
    """The query-variant budget (50 per path) is one crawl's in both modes, whichever page links the variants:
    the guide links 30 days of a calendar and the archive 30 more, so the crawl takes 50 and refuses 10."""
    from connectors.web_urls import MAX_QUERY_VARIANTS

    with serve(Site()) as site:
        days = [f"/calendar?day={day}" for day in range(60)]  # not served: each taken one is a broken link
        site.page("/", html("Home", "Start here.", "/guide.html"))
        site.page("/guide.html", html("Guide", note("rotating tokens"), *days[:30], "/archive.html"))
        site.page("/archive.html", html("Archive", note("backups"), *days[30:]))
        spec = WebConnector("web-trap", [site.url("/")], allow_private_addresses=True, delay_seconds=0.0,
                            timeout_seconds=5.0, retries=0).spec()
        report = modes.sync("web-trap", spec, "a crawl through a calendar of query variants")
        taken = {uri for uri in report["skipped"] if "/calendar?" in uri}
        assert taken == {site.url(day) for day in days[:MAX_QUERY_VARIANTS]}, sorted(taken)
        assert len(site.requests("/calendar")) == 2 * MAX_QUERY_VARIANTS  # each mode asked for its 50, no more

"""S3 sources against moto's standalone server on loopback (the real S3 and SQS HTTP APIs), in embedded
mode and in the fleet: listing, reads, bucket notifications through SQS, reconciliation and the webhook.

moto delivers ObjectCreated (Put, Copy, CompleteMultipartUpload), ObjectRemoved:Delete and
s3:TestEvent to SQS, without sequencers; the reordering tests publish S3's event JSON themselves,
with sequencers, as AWS would deliver it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from contextlib import contextmanager

import boto3
import httpx
import pytest

from connectors.s3 import S3Connector
from connectors.s3_queue import QueueConsumer
from headwater.sync.dead_letters import FileDeadLetters
from headwater.errors import ConfigurationError
from headwater.fleet.context import local_target
from headwater.fleet.enqueue import enqueue_changes
from tests.integration.fleet_harness import FleetProcesses
from tests.integration.http_harness import ServeProcess
from tests.services import aws_test_credentials, chroma_server, moto_server, redis_server, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
SECRET = "moto-secret-key-do-not-log-4f9a"
GUIDE = b"# Rotating the token\n\nRotate the deployment token every ninety days and record who rotated it.\n"


@pytest.fixture(scope="module")
def aws(tmp_path_factory):
    """moto on a free port; AWS_* in this process's environment (and so in every subprocess it starts)."""
    root = tmp_path_factory.mktemp("moto")
    with aws_test_credentials(SECRET), moto_server(root) as endpoint:
        kw = {"endpoint_url": endpoint, "region_name": "us-east-1"}
        yield {"endpoint": endpoint, "s3": boto3.client("s3", **kw), "sqs": boto3.client("sqs", **kw), "root": root}


def new_bucket(aws, name: str, notify: bool = True) -> str | None:
    """A bucket, and (with notify) an SQS queue its ObjectCreated/ObjectRemoved notifications go to; returns the queue URL."""
    aws["s3"].create_bucket(Bucket=name)
    if not notify:
        return None
    queue_url = aws["sqs"].create_queue(QueueName=f"{name}-events")["QueueUrl"]
    arn = aws["sqs"].get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    aws["s3"].put_bucket_notification_configuration(Bucket=name, NotificationConfiguration={"QueueConfigurations": [
        {"QueueArn": arn, "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]}]})
    return queue_url


def note(topic: str, n: int = 0) -> bytes:
    return f"# {topic}\n\nThis page explains {topic} step by step; revision {n}.\n".encode()


def drain(consumer: QueueConsumer) -> None:
    """Handle every message on the queue (moto enqueues notifications before the S3 call returns)."""
    while consumer.poll_once(wait_seconds=1):
        pass


def texts_by_uri(records: dict) -> dict[str, str]:
    by_uri: dict[str, list[tuple[int, str]]] = {}
    for document, metadata in records.values():
        by_uri.setdefault(metadata["uri"], []).append((metadata["chunk_index"], document))
    return {uri: "\n".join(text for _, text in sorted(chunks)) for uri, chunks in by_uri.items()}


def embedded_records(harness) -> dict:
    got = harness.store.collection.get(include=["documents", "metadatas"])
    return {i: (d, m) for i, d, m in zip(got["ids"], got["documents"], got["metadatas"])}


def multipart_put(s3, bucket: str, key: str, body: bytes) -> None:
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key)
    part = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=body)
    s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload["UploadId"],
                                 MultipartUpload={"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]})


def s3_event(bucket: str, key: str, name: str, sequencer: str | None, etag: str = "", size: int = 0) -> str:
    """S3's own notification JSON for one record (keys form-encoded, as S3 sends them)."""
    from urllib.parse import quote_plus

    obj = {"key": quote_plus(key), "size": size, "eTag": etag}
    if sequencer:
        obj["sequencer"] = sequencer
    return json.dumps({"Records": [{"eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
                                    "eventName": name, "s3": {"s3SchemaVersion": "1.0", "bucket": {"name": bucket},
                                                              "object": obj}}]})


# Embedded ---------------------------------------------------------------------------------------


def test_initial_sync_of_a_prefix_and_bad_objects(aws, make_harness, tmp_path):
    s3, bucket = aws["s3"], "initial-sync"
    new_bucket(aws, bucket, notify=False)
    odd = "docs/a key with spaces+plus é.md"
    for key, body in {"docs/guide.md": GUIDE, odd: note("unicode keys"), "docs/sub/": b"", "docs/empty.md": b"",
                      "docs/big.md": b"x" * 4000 + b"\n", "docs/picture.png": b"\x89PNG\r\n\x1a\n" + bytes(64),
                      "elsewhere/outside.md": note("outside")}.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    harness = make_harness(tmp_path)
    connector = S3Connector("docs", bucket, "docs", endpoint_url=aws["endpoint"], max_object_mb=0.002)
    connector.check()

    report = harness.engine.sync(connector)
    assert report.added == 2 and not report.failed, report
    assert set(report.skipped) == {"docs/empty.md", "docs/big.md", "docs/picture.png"}
    assert "limit" in report.skipped["docs/big.md"] and "empty" in report.skipped["docs/empty.md"]
    records = embedded_records(harness)
    assert set(texts_by_uri(records)) == {"docs/guide.md", odd}
    head = s3.head_object(Bucket=bucket, Key=odd)
    metadata = next(m for _, m in records.values() if m["uri"] == odd)
    assert metadata["url"] == f"s3://{bucket}/{odd}"
    assert metadata["doc_version"] == f"{head['ETag'].strip(chr(34))}:{head['ContentLength']}"

    again = harness.engine.sync(connector)  # nothing changed: decided from the listing, nothing read
    assert (again.added, again.updated, again.chunks_embedded, again.unchanged) == (0, 0, 0, 2)


def test_listing_is_paginated(aws):
    bucket = "paginated"
    new_bucket(aws, bucket, notify=False)
    for i in range(25):
        aws["s3"].put_object(Bucket=bucket, Key=f"p/{i:02}.md", Body=note("pages", i))
    connector = S3Connector("p", bucket, "p", endpoint_url=aws["endpoint"], page_size=10)
    listed = list(connector.list_documents())
    assert [c.uri for c in listed] == [f"p/{i:02}.md" for i in range(25)]
    assert [c.size for c in listed] == [len(note("pages", i)) for i in range(25)]  # fleet runs go largest first


def test_versioned_bucket_versions_carry_the_version_id(aws, make_harness, tmp_path):
    s3, bucket = aws["s3"], "versioned"
    new_bucket(aws, bucket, notify=False)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket=bucket, Key="v/a.md", Body=note("versions", 1))
    put = s3.put_object(Bucket=bucket, Key="v/a.md", Body=note("versions", 2))
    connector = S3Connector("v", bucket, "v", endpoint_url=aws["endpoint"])
    [listed] = list(connector.list_documents())
    assert listed.version.endswith(":" + put["VersionId"]) and listed.version == connector.stat("v/a.md").version
    harness = make_harness(tmp_path)
    harness.engine.sync(connector)
    assert harness.engine.sync(connector).unchanged == 1


def test_a_missing_bucket_is_one_clear_error_and_exit_1(aws, tmp_path):
    env = {**os.environ, "AWS_ENDPOINT_URL": aws["endpoint"], "HEADWATER_CHROMA_PATH": str(tmp_path / "chroma")}
    done = subprocess.run([sys.executable, "-m", "headwater.cli", "sync", "s3://no-such-bucket/docs"], env=env,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 1
    assert "no-such-bucket does not exist" in done.stderr and "Traceback" not in done.stderr
    assert SECRET not in done.stdout + done.stderr


def test_sync_command_indexes_a_prefix_and_exits_0(aws, tmp_path):
    s3, bucket = aws["s3"], "cli-sync"
    new_bucket(aws, bucket, notify=False)
    s3.put_object(Bucket=bucket, Key="docs/guide.md", Body=GUIDE)
    s3.put_object(Bucket=bucket, Key="docs/sub/restore.md", Body=note("restoring backups"))
    s3.put_object(Bucket=bucket, Key="other/outside.md", Body=note("outside the prefix"))
    env = {**os.environ, "AWS_ENDPOINT_URL": aws["endpoint"], "HEADWATER_CHROMA_PATH": str(tmp_path / "chroma"),
           "HEADWATER_COLLECTION": "cli-synced", "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "headwater.cli", "sync", f"s3://{bucket}/docs"], env=env,
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Sync of s3://cli-sync/docs" in done.stdout and "failed    │ 0" in done.stdout, done.stdout[-3000:]
    assert SECRET not in done.stdout + done.stderr
    from headwater.pipeline.stores import open_store
    from headwater.settings import Settings

    store = open_store(Settings(chroma_path=tmp_path / "chroma", collection="cli-synced"), create=False)
    metadatas = store.collection.get(include=["metadatas"])["metadatas"]
    assert {m["uri"] for m in metadatas} == {"docs/guide.md", "docs/sub/restore.md"}
    assert {m["url"] for m in metadatas} == {f"s3://{bucket}/docs/guide.md", f"s3://{bucket}/docs/sub/restore.md"}


@contextmanager
def enforced_auth(aws):
    """moto checks IAM from here on: a user who may do anything in S3 except read one key; yields its keys."""
    from connectors.s3 import aws_client

    iam = boto3.client("iam", endpoint_url=aws["endpoint"], region_name="us-east-1")
    iam.create_user(UserName="reader")
    iam.put_user_policy(UserName="reader", PolicyName="all-but-one", PolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
            {"Effect": "Deny", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::guarded/docs/secret.md"}]}))
    key = iam.create_access_key(UserName="reader")["AccessKey"]
    httpx.post(f"{aws['endpoint']}/moto-api/reset-auth", content=b"0").raise_for_status()
    aws_client.cache_clear()  # clients hold the credentials they were built with
    try:
        yield key["AccessKeyId"], key["SecretAccessKey"]
    finally:
        httpx.post(f"{aws['endpoint']}/moto-api/reset-auth", content=b"inf").raise_for_status()
        aws_client.cache_clear()


def test_access_denied_on_one_object_and_refused_credentials(aws, make_harness, tmp_path, monkeypatch):
    s3, bucket = aws["s3"], "guarded"
    new_bucket(aws, bucket, notify=False)
    s3.put_object(Bucket=bucket, Key="docs/open.md", Body=note("open pages"))
    s3.put_object(Bucket=bucket, Key="docs/secret.md", Body=note("guarded pages"))
    connector = S3Connector("guarded", bucket, "docs", endpoint_url=aws["endpoint"])
    harness = make_harness(tmp_path)
    with enforced_auth(aws) as (key_id, secret):
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG1")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-value-never-logged")
        with pytest.raises(ConfigurationError) as refused:
            connector.check()
        assert "credentials were refused" in str(refused.value) and "wrong-secret" not in str(refused.value)
        # The command line: one clear error at start, exit code 1, no secret anywhere in its output.
        env = {**os.environ, "AWS_ENDPOINT_URL": aws["endpoint"], "HEADWATER_CHROMA_PATH": str(tmp_path / "cli-chroma")}
        done = subprocess.run([sys.executable, "-m", "headwater.cli", "sync", f"s3://{bucket}/docs"], env=env,
                              capture_output=True, text=True, timeout=120, cwd=tmp_path)
        output = done.stdout + done.stderr
        assert done.returncode == 1, output[-3000:]
        assert output.count("credentials were refused") == 1 and "Traceback" not in output, output[-3000:]
        assert "wrong-secret-value-never-logged" not in output and SECRET not in output and secret not in output

        from connectors.s3 import aws_client
        aws_client.cache_clear()
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
        connector.check()
        report = harness.engine.sync(connector)
    assert report.added == 1 and set(report.failed) == {"docs/secret.md"}, report
    assert "permission denied" in report.failed["docs/secret.md"]
    assert set(texts_by_uri(embedded_records(harness))) == {"docs/open.md"}


def test_events_are_reflected_in_embedded_mode(aws, make_harness, tmp_path):
    s3, bucket = aws["s3"], "embedded-events"
    queue_url = new_bucket(aws, bucket)
    s3.put_object(Bucket=bucket, Key="docs/kept.md", Body=note("keeping a page"))
    harness = make_harness(tmp_path)
    connector = S3Connector("events", bucket, "docs", endpoint_url=aws["endpoint"])
    harness.engine.sync(connector)
    letters = FileDeadLetters(tmp_path / "dead-letters.jsonl", "events")
    consumer = QueueConsumer(connector, queue_url, lambda changes: harness.engine.apply(connector, changes), letters)
    drain(consumer)  # the s3:TestEvent of the configuration, and kept.md's put, already indexed
    assert consumer.counts["test_events"] == 1

    s3.put_object(Bucket=bucket, Key="docs/put.md", Body=note("restoring backups"))
    s3.put_object(Bucket=bucket, Key="docs/kept.md", Body=note("keeping a page", 2))  # overwrite
    s3.copy_object(Bucket=bucket, Key="docs/copied.md", CopySource={"Bucket": bucket, "Key": "docs/put.md"})
    multipart_put(s3, bucket, "docs/multipart.md", note("uploading in parts"))
    s3.put_object(Bucket=bucket, Key="outside/x.md", Body=note("not ours"))
    aws["sqs"].send_message(QueueUrl=queue_url, MessageBody="{not json")
    drain(consumer)
    texts = texts_by_uri(embedded_records(harness))
    assert set(texts) == {"docs/kept.md", "docs/put.md", "docs/copied.md", "docs/multipart.md"}
    assert "revision 2" in texts["docs/kept.md"] and "uploading in parts" in texts["docs/multipart.md"]
    assert consumer.counts["ignored"] == 1 and consumer.counts["dead_lettered"] == 1
    [letter] = letters.entries()
    assert "not JSON" in letter["reason"] and letter["body"] == "{not json"

    s3.delete_object(Bucket=bucket, Key="docs/put.md")
    drain(consumer)
    assert set(texts_by_uri(embedded_records(harness))) == {"docs/kept.md", "docs/copied.md", "docs/multipart.md"}
    attributes = aws["sqs"].get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "0" and attributes["ApproximateNumberOfMessagesNotVisible"] == "0"


def test_watch_command_applies_events_in_process(aws, tmp_path):
    s3, bucket = aws["s3"], "watch-command"
    queue_url = new_bucket(aws, bucket)
    s3.put_object(Bucket=bucket, Key="docs/before.md", Body=note("indexed by the first pass"))
    env = {**os.environ, "AWS_ENDPOINT_URL": aws["endpoint"], "HEADWATER_CHROMA_PATH": str(tmp_path / "chroma"),
           "HEADWATER_COLLECTION": "watched", "COLUMNS": "200"}
    watcher = subprocess.Popen([sys.executable, "-m", "headwater.cli", "watch", f"s3://{bucket}/docs", "--queue-url",
                                queue_url], env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    lines: list[str] = []
    try:
        def saw(text: str) -> bool:
            while not any(text in line for line in lines):
                line = watcher.stdout.readline()
                if not line:
                    raise AssertionError("the watcher exited: " + "".join(lines)[-3000:])
                lines.append(line)
            return True

        saw("watching s3://")
        s3.put_object(Bucket=bucket, Key="docs/during.md", Body=note("indexed from its event"))
        saw("synced: added 1")
        aws["sqs"].send_message(QueueUrl=queue_url, MessageBody='{"Records": "not a list"}')
        saw("dead-lettered")
    finally:
        watcher.send_signal(signal.SIGINT)
        rest, _ = watcher.communicate(timeout=60)
    output = "".join(lines) + rest
    assert watcher.returncode == 0, output[-3000:]
    assert "dead lettered 1" in output and SECRET not in output
    letters = FileDeadLetters(tmp_path / "dead-letters.jsonl", f"s3://{bucket}/docs").entries()
    assert [entry["reason"] for entry in letters] == ["Records is not a list"]
    from headwater.pipeline.stores import open_store
    from headwater.settings import Settings

    store = open_store(Settings(chroma_path=tmp_path / "chroma", collection="watched"), create=False)
    assert {m["uri"] for m in store.collection.get(include=["metadatas"])["metadatas"]} == {"docs/before.md", "docs/during.md"}


def test_a_message_is_kept_when_its_changes_cannot_be_applied(aws, make_harness, tmp_path):
    s3, bucket = aws["s3"], "kept-on-failure"
    queue_url = new_bucket(aws, bucket)
    harness = make_harness(tmp_path)
    connector = S3Connector("kept", bucket, "", endpoint_url=aws["endpoint"])

    def refuse(changes):
        raise RuntimeError("the collection is unavailable")

    failing = QueueConsumer(connector, queue_url, refuse)
    drain(failing)  # the test event: no changes, deleted
    # Not deleted: the message is visible again once the visibility timeout lapses (a second here).
    aws["sqs"].set_queue_attributes(QueueUrl=queue_url, Attributes={"VisibilityTimeout": "1"})
    s3.put_object(Bucket=bucket, Key="a.md", Body=note("durable events"))
    with pytest.raises(RuntimeError):
        failing.poll_once(wait_seconds=1)
    working = QueueConsumer(connector, queue_url, lambda changes: harness.engine.apply(connector, changes))
    wait_until(lambda: working.poll_once(wait_seconds=1) > 0, 30, "the redelivered message")
    assert set(texts_by_uri(embedded_records(harness))) == {"a.md"}


def test_duplicated_and_reordered_events_converge_on_the_newest_object(aws, make_harness, tmp_path):
    s3, sqs, bucket = aws["s3"], aws["sqs"], "reordered"
    new_bucket(aws, bucket, notify=False)
    queue_url = sqs.create_queue(QueueName="reordered-events")["QueueUrl"]
    harness = make_harness(tmp_path)
    connector = S3Connector("reordered", bucket, "r", endpoint_url=aws["endpoint"])
    deliveries = []
    # With sequencers (as AWS sends them): three versions of one key, a delete between; the last put is what is there.
    for n in (1, 2, 3):
        s3.put_object(Bucket=bucket, Key="r/versions.md", Body=note("versioned notes", n))
        head = s3.head_object(Bucket=bucket, Key="r/versions.md")
        deliveries.append(s3_event(bucket, "r/versions.md", "ObjectCreated:Put", f"00{n * 2:02X}", head["ETag"].strip('"'),
                                   head["ContentLength"]))
        if n == 2:
            deliveries.append(s3_event(bucket, "r/versions.md", "ObjectRemoved:Delete", "0005"))
    # Created, then deleted: gone, whichever order the events come in.
    s3.put_object(Bucket=bucket, Key="r/gone.md", Body=note("short-lived"))
    s3.delete_object(Bucket=bucket, Key="r/gone.md")
    deliveries += [s3_event(bucket, "r/gone.md", "ObjectCreated:Put", "0001", "e", 10),
                   s3_event(bucket, "r/gone.md", "ObjectRemoved:Delete", "0002")]
    # Without sequencers (moto, MinIO): resolved by the object's current state.
    s3.put_object(Bucket=bucket, Key="r/no sequencer.md", Body=note("current state", 2))
    deliveries += [s3_event(bucket, "r/no sequencer.md", "ObjectRemoved:Delete", None),
                   s3_event(bucket, "r/no sequencer.md", "ObjectCreated:Put", None)]
    shuffled = deliveries * 5
    random.Random(7).shuffle(shuffled)
    for body in shuffled:
        sqs.send_message(QueueUrl=queue_url, MessageBody=body)
    consumer = QueueConsumer(connector, queue_url, lambda changes: harness.engine.apply(connector, changes))
    drain(consumer)
    texts = texts_by_uri(embedded_records(harness))
    assert set(texts) == {"r/versions.md", "r/no sequencer.md"}
    assert "revision 3" in texts["r/versions.md"] and "revision 2" in texts["r/no sequencer.md"]
    assert consumer.counts["stale"] > 0


def test_an_event_for_an_object_already_deleted_removes_it_and_fails_nothing(aws, make_harness, tmp_path):
    s3, sqs, bucket = aws["s3"], aws["sqs"], "deleted-before-read"
    new_bucket(aws, bucket, notify=False)  # only the events published below reach the queue
    queue_url = sqs.create_queue(QueueName="deleted-before-read-events")["QueueUrl"]
    harness = make_harness(tmp_path)
    connector = S3Connector("deleted", bucket, "docs", endpoint_url=aws["endpoint"])
    for key in ("docs/indexed.md", "docs/kept.md"):
        s3.put_object(Bucket=bucket, Key=key, Body=note(key))
    assert harness.engine.sync(connector).added == 2
    events = []
    for key, sequencer in (("docs/indexed.md", "0062E99A88DC407460"), ("docs/never indexed.md", None)):
        put = s3.put_object(Bucket=bucket, Key=key, Body=note("deleted before its event is read"))
        events.append(s3_event(bucket, key, "ObjectCreated:Put", sequencer, put["ETag"].strip('"'),
                               len(note("deleted before its event is read"))))
        s3.delete_object(Bucket=bucket, Key=key)
    for body in events:  # the Put events arrive only now, after the deletes (with and without a sequencer)
        sqs.send_message(QueueUrl=queue_url, MessageBody=body)
    reports = []
    consumer = QueueConsumer(connector, queue_url, lambda changes: reports.append(harness.engine.apply(connector, changes)))
    drain(consumer)
    assert reports and not any(report.failed for report in reports), reports
    # The event's object is gone when it is read: its chunks go, and the report says why.
    skipped = {uri: reason for report in reports for uri, reason in report.skipped.items()}
    assert "removed before it could be read" in skipped.get("docs/indexed.md", ""), reports
    assert sum(report.chunks_deleted for report in reports) >= 1, reports
    assert set(texts_by_uri(embedded_records(harness))) == {"docs/kept.md"}
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "0" and attributes["ApproximateNumberOfMessagesNotVisible"] == "0"


def test_an_object_deleted_while_the_consumer_was_down_is_removed_by_reconciliation(aws, make_harness, tmp_path):
    s3, bucket = aws["s3"], "reconciled"
    queue_url = new_bucket(aws, bucket)
    for i in range(4):
        s3.put_object(Bucket=bucket, Key=f"docs/{i}.md", Body=note("reconciliation", i))
    harness = make_harness(tmp_path)
    connector = S3Connector("reconciled", bucket, "docs", endpoint_url=aws["endpoint"])
    harness.engine.sync(connector)
    s3.delete_object(Bucket=bucket, Key="docs/0.md")
    s3.put_object(Bucket=bucket, Key="docs/new.md", Body=note("missed events"))
    aws["sqs"].purge_queue(QueueUrl=queue_url)  # the events are lost (the consumer was down past their retention)
    report = harness.engine.sync(connector)
    assert (report.deleted, report.added) == (1, 1)
    assert set(texts_by_uri(embedded_records(harness))) == {"docs/1.md", "docs/2.md", "docs/3.md", "docs/new.md"}


# Fleet ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fleet(aws, tmp_path_factory):
    root = tmp_path_factory.mktemp("s3-fleet")
    with redis_server(root) as redis_url, chroma_server(root) as (host, port):
        processes = FleetProcesses(redis_url, host, port, root)
        processes.start_fleet()
        yield processes
        processes.stop()


def test_watch_fleet_reflects_put_overwrite_copy_multipart_and_delete(aws, fleet, tmp_path):
    s3, bucket, collection = aws["s3"], "fleet-events", "s3-fleet-events"
    queue_url = new_bucket(aws, bucket)
    s3.put_object(Bucket=bucket, Key="docs/first.md", Body=note("the first page"))
    watcher = subprocess.Popen([sys.executable, "-m", "headwater.cli", "watch", f"s3://{bucket}/docs", "--fleet",
                                "--queue-url", queue_url, "--source-id", "fleet-s3"],
                               env={**fleet.env, "HEADWATER_COLLECTION": collection, "AWS_ENDPOINT_URL": aws["endpoint"]},
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    try:
        wait_until(lambda: fleet.documents(collection) == {"docs/first.md"}, 120, "the first run")
        s3.put_object(Bucket=bucket, Key="docs/put.md", Body=note("restoring backups"))
        s3.put_object(Bucket=bucket, Key="docs/first.md", Body=note("the first page", 2))
        s3.copy_object(Bucket=bucket, Key="docs/copied.md", CopySource={"Bucket": bucket, "Key": "docs/put.md"})
        multipart_put(s3, bucket, "docs/multipart.md", note("uploading in parts"))
        expected = {"docs/first.md", "docs/put.md", "docs/copied.md", "docs/multipart.md"}
        wait_until(lambda: fleet.documents(collection) == expected
                   and "revision 2" in texts_by_uri(fleet.records(collection))["docs/first.md"], 120, "the live changes")
        s3.delete_object(Bucket=bucket, Key="docs/put.md")
        wait_until(lambda: fleet.documents(collection) == expected - {"docs/put.md"}, 120, "the delete")
        assert {(run.kind, run.trigger) for run in fleet.client(collection).runs.list(50, "fleet-s3")} == {
            ("full", "watch"), ("live", "watch")}
    finally:
        watcher.send_signal(signal.SIGINT)
        output, _ = watcher.communicate(timeout=60)
    assert watcher.returncode == 0, output[-3000:]
    assert SECRET not in output


def test_fleet_duplicated_and_reordered_events_converge(aws, fleet, tmp_path):
    s3, bucket, collection = aws["s3"], "fleet-reordered", "s3-fleet-reordered"
    new_bucket(aws, bucket, notify=False)
    connector = S3Connector("fleet-reordered", bucket, "", endpoint_url=aws["endpoint"])
    client = fleet.client(collection)
    events = []
    for n in (1, 2, 3):
        put = s3.put_object(Bucket=bucket, Key="notes.md", Body=note("fleet ordering", n))
        events.append(s3_event(bucket, "notes.md", "ObjectCreated:Put", f"00{n:02X}", put["ETag"].strip('"'),
                               len(note("fleet ordering", n))))
    s3.put_object(Bucket=bucket, Key="deleted.md", Body=note("short-lived"))
    s3.delete_object(Bucket=bucket, Key="deleted.md")
    events += [s3_event(bucket, "deleted.md", "ObjectCreated:Put", "0001", "e", 10),
               s3_event(bucket, "deleted.md", "ObjectRemoved:Delete", "0002")]
    shuffled = events * 5
    random.Random(11).shuffle(shuffled)
    from connectors.s3_events import parse_message

    runs = []
    for body in shuffled:  # one consumer batch per message: the worst case for ordering
        changes, _, _ = connector.changes_for(parse_message(body).events)
        run_id = enqueue_changes(client, connector.spec(), local_target(client.settings), changes) if changes else None
        if run_id:
            runs.append(run_id)
    for run_id in runs:
        fleet.wait_for_run(client, run_id)
    texts = texts_by_uri(fleet.records(collection))
    assert set(texts) == {"notes.md"} and "revision 3" in texts["notes.md"]
    assert len(runs) < len(shuffled)  # duplicates and late events were dropped at the door


def test_a_head_resolved_change_does_not_hide_later_sequencer_events(aws, tmp_path):
    """A source gets events without a sequencer (resolved by a HEAD, keyed by a 20-digit time) and with
    one (S3's hex sequencer) for the same key: the fleet's Redis must order each kind only among its own
    kind. Held in one order, the time sorted above AWS's "00..." sequencers and every later event of the
    key was dropped as stale (and after a sequencer above "1...", every later HEAD)."""
    import redis

    from connectors.s3_events import parse_message
    from headwater.fleet.runs import RunStore

    s3, bucket = aws["s3"], "mixed-order"
    new_bucket(aws, bucket, notify=False)
    connector = S3Connector("mixed", bucket, "", endpoint_url=aws["endpoint"])

    def change(sequencer: str | None):  # noqa: ANN202
        head = s3.head_object(Bucket=bucket, Key="a.md")
        body = s3_event(bucket, "a.md", "ObjectCreated:Put", sequencer, head["ETag"].strip('"'), head["ContentLength"])
        [made], _, _ = connector.changes_for(parse_message(body).events)
        return made

    with redis_server(tmp_path) as url:
        runs = RunStore(redis.Redis.from_url(url))
        s3.put_object(Bucket=bucket, Key="a.md", Body=note("mixed ordering", 1))
        observed = change(None)  # a HEAD
        assert runs.accept_live("mixed", observed) and runs.claim_order("mixed", observed)
        s3.put_object(Bucket=bucket, Key="a.md", Body=note("mixed ordering", 2))
        sequenced = change("0055AED6DCD90281E5")
        assert runs.accept_live("mixed", sequenced), "a sequencer event after a HEAD-resolved change was dropped"
        assert runs.claim_order("mixed", sequenced), "a sequencer event after a HEAD-resolved change may not write"
        # Sequencers still order among themselves: a duplicate and an older event are stale.
        assert not runs.accept_live("mixed", sequenced)
        assert not runs.accept_live("mixed", change("0055AED6DCD90281E4"))
        # The other way round: after a sequencer that sorts above any time, a HEAD still counts.
        assert runs.accept_live("mixed", change("5F00AED6DCD90281E5"))
        later = change(None)
        assert runs.accept_live("mixed", later) and runs.claim_order("mixed", later)


# Webhook ----------------------------------------------------------------------------------------


def test_webhook_applies_events_and_rejects_bad_tokens_with_nothing_enqueued(aws, tmp_path):
    s3, bucket = aws["s3"], "webhook-bucket"
    new_bucket(aws, bucket, notify=False)
    (tmp_path / "headwater.toml").write_text(
        f'[[sources]]\nid = "minio"\nkind = "s3"\noptions = {{ bucket = "{bucket}", prefix = "in", '
        f'endpoint_url = "{aws["endpoint"]}" }}\n', encoding="utf-8")
    token = "webhook-token-0123456789abcdef"
    server = ServeProcess(tmp_path, {"HEADWATER_CHROMA_PATH": str(tmp_path / "chroma"), "HEADWATER_S3_WEBHOOK_TOKEN": token,
                                     "HEADWATER_CONFIG_FILE": str(tmp_path / "headwater.toml")})
    with server:
        s3.put_object(Bucket=bucket, Key="in/pushed note.md", Body=note("pushed notifications"))
        minio = {"EventName": "s3:ObjectCreated:Put", "Key": f"{bucket}/in/pushed note.md",
                 "Records": [{"eventVersion": "2.0", "eventSource": "minio:s3", "eventName": "s3:ObjectCreated:Put",
                              "s3": {"bucket": {"name": bucket}, "object": {"key": "in%2Fpushed+note.md", "size": 10,
                                                                            "sequencer": "17F0E5B6A1C2D3E4"}}}]}
        url = f"{server.url}/webhooks/s3/minio"
        for headers in ({}, {"Authorization": "Bearer wrong-token"}, {"Authorization": token}):
            assert httpx.post(url, json=minio, headers=headers, timeout=30).status_code == 401
        good = {"Authorization": f"Bearer {token}"}
        assert httpx.post(url, content=b"{broken", headers=good, timeout=30).status_code == 400
        assert server.api.get("/api/v1/runs", params={"source_id": "minio"}).json() == []  # nothing enqueued

        answer = httpx.post(url, json=minio, headers=good, timeout=30)
        assert answer.status_code == 202, answer.text
        run = server.wait_for_run(answer.json()["run_id"])
        assert run["status"] == "complete", run
        documents = server.api.get("/api/v1/sources/minio/documents").json()
        assert "in/pushed note.md" in json.dumps(documents)

        s3.delete_object(Bucket=bucket, Key="in/pushed note.md")
        removed = {**minio, "Records": [{**minio["Records"][0], "eventName": "s3:ObjectRemoved:Delete"}]}
        outside = {**minio, "Records": [{**minio["Records"][0], "s3": {"bucket": {"name": "another-bucket"},
                                                                        "object": {"key": "in%2Fx.md"}}}]}
        assert httpx.post(url, json=outside, headers=good, timeout=30).json()["ignored"] == 1
        answer = httpx.post(url, json=removed, headers=good, timeout=30)
        server.wait_for_run(answer.json()["run_id"])
        assert "pushed note.md" not in json.dumps(server.api.get("/api/v1/sources/minio/documents").json())
        assert token not in server.log()

        # An S3 source added through the API, and a full run of it.
        created = server.api.post("/api/v1/sources", json={"id": "api-s3", "kind": "s3", "options": {
            "bucket": bucket, "prefix": "api", "endpoint_url": aws["endpoint"]}})
        assert created.status_code == 201, created.text
        s3.put_object(Bucket=bucket, Key="api/added.md", Body=note("sources added over HTTP"))
        run = server.wait_for_run(server.api.post("/api/v1/sources/api-s3/runs").json()["run_id"])
        assert run["status"] == "complete" and run["indexed"] == 1, run
        assert server.api.post("/api/v1/sources", json={"id": "bad-s3", "kind": "s3", "options": {
            "path": "/tmp"}}).status_code == 422

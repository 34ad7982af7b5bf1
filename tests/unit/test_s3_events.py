"""S3 event notifications in every envelope they arrive in, and what an S3 source makes of them (no services)."""

import json

import pytest

from connectors.base import build_connector_for_url, kind_for_url
from connectors.s3 import S3Connector, object_version
from connectors.s3_events import CREATED, REMOVED, MalformedEvent, normalise_sequencer, parse_message
from connectors.s3_queue import sqs_endpoint
from headwater.models import Op


def record(name="ObjectCreated:Put", key="docs/a.md", bucket="b", sequencer="0055AED6DCD90281E5", **obj):
    return {"eventVersion": "2.1", "eventSource": "aws:s3", "eventName": name,
            "s3": {"bucket": {"name": bucket}, "object": {"key": key, "size": 7, "eTag": "abc", "sequencer": sequencer, **obj}}}


def test_direct_notification_with_encoded_keys():
    body = json.dumps({"Records": [record(key="docs/red+flower%C3%A9+%2B1.md"), record("ObjectRemoved:Delete", key="docs/x.md")]})
    parsed = parse_message(body)
    assert [(e.kind, e.key) for e in parsed.events] == [(CREATED, "docs/red floweré +1.md"), (REMOVED, "docs/x.md")]
    assert parsed.events[0].etag == "abc" and parsed.events[0].size == 7
    assert parsed.events[0].sequencer == "0055AED6DCD90281E5".ljust(32, "0")


def test_sns_wrapped_and_eventbridge_and_test_event():
    inner = json.dumps({"Records": [record()]})
    assert parse_message(json.dumps({"Type": "Notification", "Message": inner})).events[0].key == "docs/a.md"
    bridge = {"version": "0", "detail-type": "Object Deleted", "source": "aws.s3",
              "detail": {"bucket": {"name": "b"}, "object": {"key": "docs/a+b.md", "sequencer": "0A"},
                         "deletion-type": "Permanently Deleted"}}
    event = parse_message(json.dumps(bridge)).events[0]
    assert (event.kind, event.key, event.sequencer) == (REMOVED, "docs/a b.md", "0A".ljust(32, "0"))
    assert parse_message(json.dumps({"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "b"})).test_events == 1


def test_minio_sequencer_is_not_trusted():
    minio = record(key="docs%2Fa.md")
    minio["eventSource"] = "minio:s3"
    event = parse_message(json.dumps({"EventName": "s3:ObjectCreated:Put", "Key": "b/docs/a.md", "Records": [minio]})).events[0]
    assert event.key == "docs/a.md" and event.sequencer is None


@pytest.mark.parametrize("body", ["not json", "[]", json.dumps({"hello": 1}), json.dumps({"Records": [{"s3": {}}]}),
                                  json.dumps({"Records": [{"eventName": "ObjectCreated:Put", "s3": {"bucket": {}}}]})])
def test_malformed_messages_say_why(body):
    with pytest.raises(MalformedEvent):
        parse_message(body)


def test_sequencers_compare_after_right_padding():
    # S3's rule: pad the shorter with zeros, then the greater string is the later event.
    assert normalise_sequencer("0055AED6DCD90281E5") < normalise_sequencer("0055AED6DCD90281E6")
    assert normalise_sequencer("0055AED6DCD90281E5") == normalise_sequencer("0055AED6DCD90281E500")
    assert normalise_sequencer("not hex!") is None


def test_url_scheme_registration_and_prefix_as_directory():
    assert kind_for_url("s3://bucket/docs") == "s3"
    connector = build_connector_for_url("s3://bucket/docs")
    assert (connector.source_id, connector.bucket, connector.prefix) == ("s3://bucket/docs", "bucket", "docs/")
    assert connector.wants("docs/a.md") and not connector.wants("docs-old/a.md") and not connector.wants("docs/sub/")
    with pytest.raises(ValueError, match="s3://"):
        build_connector_for_url("ftp://host/x")


def test_globs_match_below_the_prefix():
    connector = S3Connector("s", "bucket", "docs", include=["*.md"], exclude=["drafts/**"])
    assert connector.wants("docs/a.md") and connector.wants("docs/sub/b.md")
    assert not connector.wants("docs/drafts/c.md") and not connector.wants("docs/a.txt")


def test_events_with_sequencers_drop_duplicates_and_late_arrivals():
    connector = S3Connector("s", "b", "docs")
    put1, delete, put2 = (parse_message(json.dumps({"Records": [r]})).events[0] for r in (
        record(sequencer="01"), record("ObjectRemoved:Delete", sequencer="02"), record(sequencer="03", eTag="v3")))
    other = parse_message(json.dumps({"Records": [record(bucket="other"), record(key="elsewhere/a.md")]})).events
    changes, counts, advanced = connector.changes_for([put2, put2, delete, put1, *other])
    assert [(c.op, c.version) for c in changes] == [(Op.UPSERT, "v3:7")]
    assert counts == {"ignored": 2, "stale": 3}
    # Remembered by the caller once accepted: a redelivery of the older events is stale.
    again, counts, _ = connector.changes_for([delete, put1], advanced)
    assert again == [] and counts["stale"] == 2


def test_object_version_and_queue_endpoints():
    assert object_version('"e1"', 5) == "e1:5"
    assert object_version("e1", 5, "v9") == "e1:5:v9" and object_version("e1", 5, "null") == "e1:5"
    assert sqs_endpoint("https://sqs.eu-west-1.amazonaws.com/123/q") == ("eu-west-1", None)
    assert sqs_endpoint("http://127.0.0.1:5000/123456789012/q") == (None, "http://127.0.0.1:5000")


def test_a_url_scheme_belongs_to_one_kind_and_settings_accept_registered_kinds():
    from connectors.base import register_connector
    from headwater.sources.model import SourceConfig

    with pytest.raises(ValueError, match="already belongs to source kind 's3'"):
        register_connector("another-s3", S3Connector, url_schemes=("s3",))
    assert SourceConfig(id="b", kind="s3", options={"bucket": "b"}).kind == "s3"
    with pytest.raises(ValueError, match="unknown source kind"):
        SourceConfig(id="x", kind="ftp")


def test_spec_never_carries_credentials_and_rebuilds_the_same_connector(monkeypatch):
    from connectors.base import build_connector

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEEXAMPLE11")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "never-in-a-spec")
    connector = S3Connector("s", "bucket", "docs", include=["*.md"], endpoint_url="http://127.0.0.1:9", region="eu-west-1",
                            max_object_mb=2)
    spec = connector.spec()
    assert "never-in-a-spec" not in json.dumps(spec) and "AKIA" not in json.dumps(spec)
    rebuilt = build_connector(spec["kind"], spec["id"], **spec["options"])
    assert rebuilt.spec() == spec and rebuilt.max_object_bytes == 2 * 1048576


def test_a_misspelt_option_is_an_error():
    from connectors.base import build_connector

    with pytest.raises(ValueError, match="options.max_object_size: unknown option; known: bucket, .*max_object_mb"):
        build_connector("s3", "s", bucket="bucket", max_object_size=3)


def test_sequencer_changes_and_head_resolved_changes_are_ordered_apart():
    # A HEAD-resolved change is keyed by a 20-digit time: as a string it sorts above AWS's sequencers
    # ("00..."), so held in one order with them it made every later event of the key look stale.
    import time

    from connectors.s3 import SEQUENCER_SPACE
    from headwater.fleet.enqueue import newest_per_uri
    from headwater.models import DocumentChange

    connector = S3Connector("s", "b", "docs")
    early, late = (parse_message(json.dumps({"Records": [record(sequencer=s)]})).events[0]
                   for s in ("0055AED6DCD90281E5", "0055AED6DCD90281E6"))
    [sequenced], _, _ = connector.changes_for([early])
    observed = DocumentChange("s", "docs/a.md", Op.UPSERT, sequence=f"{time.time_ns():020d}")  # as current_state keys it
    assert observed.order_key > sequenced.order_key  # why the two may never share one order
    assert sequenced.order_space == SEQUENCER_SPACE and observed.order_space == ""
    assert DocumentChange.from_json(sequenced.to_json()) == sequenced  # the space travels with the change
    [newer], _, _ = connector.changes_for([late])
    # Within a space the newest wins; across spaces the one given later stands for the uri.
    assert newest_per_uri([newer, sequenced]) == [newer]
    assert newest_per_uri([sequenced, observed]) == [observed] and newest_per_uri([observed, newer]) == [newer]

"""S3 event notifications as plain facts: one `ObjectEvent` per record, from any of the ways they arrive.

The same facts come in four envelopes: an S3 notification delivered straight to SQS
(`{"Records": [...]}`), the same wrapped by SNS (`{"Type": "Notification", "Message": "<json>"}`),
an EventBridge event (`{"detail-type": "Object Created", "detail": {...}}`), and a webhook from an
S3-compatible store such as MinIO (S3-shaped `Records`, `eventSource` `minio:s3`). Keys arrive
form-encoded (`red flower.jpg` as `red+flower.jpg`), and decoded here.

Nothing here talks to S3: deciding what an event means for the collection is the connector's job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_plus

CREATED = "created"
REMOVED = "removed"
# S3 sequencers are hex strings of varying length: right-padded with zeros they compare as strings.
SEQUENCER_WIDTH = 32


class MalformedEvent(ValueError):
    """A message that is not an S3 event notification Headwater can read; the reason says why."""


@dataclass(frozen=True)
class ObjectEvent:
    """One object changed: created (put, copy, multipart upload, restore) or removed."""

    bucket: str
    key: str
    kind: str  # CREATED | REMOVED
    name: str  # the provider's event name, e.g. ObjectCreated:Put
    etag: str | None = None
    size: int | None = None
    version_id: str | None = None
    # Orders events of one key (fixed width; greater is later); None where the store gives no real order.
    sequencer: str | None = None


@dataclass(frozen=True)
class ParsedMessage:
    events: list[ObjectEvent]
    test_events: int = 0  # s3:TestEvent, sent when notifications are configured: nothing to do
    other_events: int = 0  # records of kinds Headwater does not act on (restore started, replication, ...)


def normalise_sequencer(sequencer: Any) -> str | None:
    """A sequencer as a fixed-width string (S3's rule: right-pad the shorter with zeros, then compare)."""
    if not isinstance(sequencer, str) or not sequencer:
        return None
    text = sequencer.strip().upper()
    if len(text) > SEQUENCER_WIDTH or any(c not in "0123456789ABCDEF" for c in text):
        return None
    return text.ljust(SEQUENCER_WIDTH, "0")


def parse_message(body: str | bytes) -> ParsedMessage:
    """Every object event in one SQS message or webhook body; raises MalformedEvent when it is none of the known shapes."""
    try:
        document = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MalformedEvent(f"not JSON ({exc})") from None
    return parse_document(document)


def parse_document(document: Any) -> ParsedMessage:
    """parse_message, for JSON already decoded."""
    if not isinstance(document, dict):
        raise MalformedEvent("not a JSON object")
    if document.get("Type") == "Notification" and "Message" in document:  # wrapped by SNS
        return parse_message(document["Message"]) if isinstance(document["Message"], str) else parse_document(document["Message"])
    if document.get("Event") == "s3:TestEvent":  # sent once when a notification is configured
        return ParsedMessage([], test_events=1)
    if "detail" in document and "detail-type" in document:
        return _eventbridge(document)
    if "Records" in document:
        records = document["Records"]
        if not isinstance(records, list):
            raise MalformedEvent("Records is not a list")
        events, other = [], 0
        for position, record in enumerate(records):
            event = _record(record, position)
            if event is None:
                other += 1
            else:
                events.append(event)
        return ParsedMessage(events, other_events=other)
    raise MalformedEvent("neither an S3 notification (Records), an SNS notification nor an EventBridge event")


def _record(record: Any, position: int) -> ObjectEvent | None:
    if not isinstance(record, dict):
        raise MalformedEvent(f"record {position} is not an object")
    name = record.get("eventName")
    if not isinstance(name, str):
        raise MalformedEvent(f"record {position} has no eventName")
    name = name.removeprefix("s3:")
    kind = CREATED if name.startswith("ObjectCreated:") else REMOVED if name.startswith("ObjectRemoved:") else None
    if kind is None:
        return None
    s3 = record.get("s3")
    bucket = s3.get("bucket", {}).get("name") if isinstance(s3, dict) and isinstance(s3.get("bucket"), dict) else None
    obj = s3.get("object") if isinstance(s3, dict) else None
    if not isinstance(bucket, str) or not bucket or not isinstance(obj, dict) or not isinstance(obj.get("key"), str):
        raise MalformedEvent(f"record {position} ({name}) has no s3.bucket.name or s3.object.key")
    # MinIO's sequencer is only the modification time, which orders nothing: its events are resolved
    # by the object's current state instead (a HEAD).
    minio = str(record.get("eventSource", "")).startswith("minio")
    return ObjectEvent(bucket=bucket, key=unquote_plus(obj["key"]), kind=kind, name=name,
                       etag=_etag(obj.get("eTag") or obj.get("etag")), size=_size(obj.get("size")),
                       version_id=obj.get("versionId") or None,
                       sequencer=None if minio else normalise_sequencer(obj.get("sequencer")))


def _eventbridge(document: dict[str, Any]) -> ParsedMessage:
    kind = {"Object Created": CREATED, "Object Deleted": REMOVED}.get(document.get("detail-type"))
    if kind is None:
        return ParsedMessage([], other_events=1)
    detail = document["detail"]
    if not isinstance(detail, dict):
        raise MalformedEvent("EventBridge detail is not an object")
    bucket = detail.get("bucket", {}).get("name") if isinstance(detail.get("bucket"), dict) else None
    obj = detail.get("object")
    if not isinstance(bucket, str) or not bucket or not isinstance(obj, dict) or not isinstance(obj.get("key"), str):
        raise MalformedEvent(f"EventBridge {document['detail-type']} event has no detail.bucket.name or detail.object.key")
    # Decoded like notification keys (S3 form-encodes keys in what it sends to EventBridge too).
    name = f"{document['detail-type']}:{detail.get('reason') or detail.get('deletion-type') or ''}".rstrip(":")
    return ParsedMessage([ObjectEvent(bucket=bucket, key=unquote_plus(obj["key"]), kind=kind, name=name,
                                      etag=_etag(obj.get("etag") or obj.get("eTag")), size=_size(obj.get("size")),
                                      version_id=obj.get("version-id") or None,
                                      sequencer=normalise_sequencer(obj.get("sequencer")))])


def _etag(value: Any) -> str | None:
    return value.strip('"') if isinstance(value, str) and value else None


def _size(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None

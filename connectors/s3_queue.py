"""The SQS consumer of an S3 source: long-polls the queue its event notifications go to, turns each batch
of messages into live changes, and deletes the messages only once those changes were accepted.

- A message is deleted after `on_changes` returned for its changes (applied in-process, or queued
  for the fleet); if that raises, nothing is deleted and SQS delivers the messages again after the
  queue's visibility timeout (and to its own dead-letter queue after its redrive limit, if set).
- A message that is not an S3 event notification is dead-lettered: reported with its reason through
  `on_dead_letter`, then deleted, so it never blocks the queue.
- Events for another bucket, or keys outside the source's prefix and globs, are ignored and counted.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from connectors.s3_events import MalformedEvent, parse_message
from headwater.models import DocumentChange

log = logging.getLogger(__name__)

# Latest sequencer per key kept in memory (the fleet also keeps one per key in Redis): bounded.
_LATEST_KEYS = 100_000
# Bytes of a dead-lettered message kept with its reason (enough to recognise it).
DEAD_LETTER_BODY_CHARS = 2000


def sqs_endpoint(queue_url: str) -> tuple[str | None, str | None]:
    """(region, endpoint) for an SQS queue URL: AWS queues name their region; any other host is the endpoint."""
    parts = urlsplit(queue_url)
    host = parts.hostname or ""
    if host.endswith(".amazonaws.com"):
        labels = host.split(".")
        region = labels[1] if len(labels) > 3 and labels[0] == "sqs" else None
        return region, None
    if not parts.scheme or not host:
        raise ValueError(f"{queue_url} is not an SQS queue URL (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME)")
    return None, f"{parts.scheme}://{parts.netloc}"


class QueueConsumer:
    """Consumes one SQS queue for one S3 connector."""

    def __init__(self, connector: Any, queue_url: str, on_changes: Callable[[list[DocumentChange]], Any],
                 on_dead_letter: Callable[[str, str, str], None] | None = None, *, wait_seconds: int = 10,
                 retry_seconds: float = 5.0) -> None:
        from connectors.s3 import aws_client

        region, endpoint = sqs_endpoint(queue_url)
        self.sqs = aws_client("sqs", region or connector.region, endpoint)
        self.connector = connector
        self.queue_url = queue_url
        self.on_changes = on_changes
        self.on_dead_letter = on_dead_letter or (lambda message_id, reason, body: None)
        self.wait_seconds = max(0, min(20, wait_seconds))
        self.retry_seconds = retry_seconds
        self.latest: collections.OrderedDict[str, str] = collections.OrderedDict()
        self.counts = collections.Counter()

    def run(self, stop: threading.Event) -> None:
        """Receive, handle, delete, until `stop` is set; a failed batch is left on the queue and tried again."""
        while not stop.is_set():
            try:
                self.poll_once()
            except Exception as exc:  # noqa: BLE001  (the queue, the store or the collection blinked)
                # Nothing of the batch was deleted: SQS hands it back after the queue's visibility timeout.
                log.warning("event messages were not applied (%s: %s); SQS delivers them again", type(exc).__name__, exc)
                self.counts["failed_batches"] += 1
                stop.wait(self.retry_seconds)

    def poll_once(self, wait_seconds: int | None = None) -> int:
        """One long poll and its batch handled; returns how many messages it received."""
        messages = self.sqs.receive_message(
            QueueUrl=self.queue_url, MaxNumberOfMessages=10,
            WaitTimeSeconds=self.wait_seconds if wait_seconds is None else wait_seconds).get("Messages", [])
        if messages:
            self.handle(messages)
        return len(messages)

    def handle(self, messages: list[dict[str, Any]]) -> list[DocumentChange]:
        """One received batch: changes accepted first, then the messages deleted. Returns the changes."""
        events, done, dead = [], [], []
        for message in messages:
            self.counts["messages"] += 1
            body = message.get("Body", "")
            try:
                parsed = parse_message(body)
            except MalformedEvent as exc:
                self.counts["dead_lettered"] += 1
                log.warning("event message %s is not an S3 event notification (%s); dead-lettered",
                            message.get("MessageId"), exc)
                self.on_dead_letter(str(message.get("MessageId", "")), str(exc), body[:DEAD_LETTER_BODY_CHARS])
                dead.append(message)
                continue
            self.counts["test_events"] += parsed.test_events
            self.counts["other_events"] += parsed.other_events
            events.extend(parsed.events)
            done.append(message)
        self._delete(dead)  # recorded: gone from the queue whatever happens to the rest of the batch
        changes, counts, advanced = self.connector.changes_for(events, self.latest)
        self.counts.update(counts)
        if changes:
            self.on_changes(changes)  # raises: nothing below happens, the messages come back
            self.counts["changes"] += len(changes)
        self._remember(advanced)
        self._delete(done)
        return changes

    def _remember(self, advanced: dict[str, str]) -> None:
        for key, sequencer in advanced.items():
            self.latest[key] = sequencer
            self.latest.move_to_end(key)
        while len(self.latest) > _LATEST_KEYS:
            self.latest.popitem(last=False)

    def _delete(self, messages: list[dict[str, Any]]) -> None:
        if not messages:
            return
        entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]
        result = self.sqs.delete_message_batch(QueueUrl=self.queue_url, Entries=entries)
        for failure in result.get("Failed", ()):
            # Delivered again later; duplicates are harmless (ordered by sequencer or current state).
            log.warning("could not delete event message %s (%s)", failure.get("Id"), failure.get("Code"))

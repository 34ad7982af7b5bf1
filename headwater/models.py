"""The change event connectors emit and the chunk record the pipeline writes."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any


class Op(str, Enum):
    UPSERT = "upsert"
    DELETE = "delete"


class Trigger(str, Enum):
    """What started a run, in both modes: the operator sees why a run happened."""

    MANUAL = "manual"  # the API, the dashboard or `headwater sync`
    SCHEDULE = "schedule"
    RETRY = "retry"
    WEBHOOK = "webhook"  # a GitHub push
    S3_EVENT = "s3-event"  # an S3 event notification (webhook or SQS)
    WATCH = "watch"  # `headwater watch`: filesystem or queue events


def time_sequence() -> str:
    """Now as a time-like order key: nanoseconds, fixed width, so a greater string is later."""
    return f"{time.time_ns():020d}"


@dataclass(frozen=True)
class DocumentChange:
    """What a connector saw change: a document to (re)index or to remove. It never carries content."""

    source_id: str
    uri: str
    op: Op
    # The connector's cheap fingerprint (e.g. mtime and size); the content hash is decided later.
    version: str | None = None
    observed_at: float = field(default_factory=time.time)
    # Orders changes of one uri (live changes): fixed width, so a greater string is a later change
    # (S3's sequencer, a file's mtime in ns, a commit's position). Defaults to when it was observed.
    sequence: str | None = None
    # Which order keys `sequence` may be compared with: changes of one uri are ordered only against
    # changes of the same space. "" is time-like keys (20-digit ns); S3's sequencers are a space of
    # their own, since a hex sequencer and a time say nothing about each other.
    order_space: str = ""
    # Bytes, where the listing says so for free (a stat, an object listing): a fleet run starts its
    # largest documents first, so its last ones are small and both workers stay busy to the end.
    size: int | None = None

    @property
    def order_key(self) -> str:
        return self.sequence if self.sequence is not None else f"{int(self.observed_at * 1e9):020d}"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["op"] = self.op.value
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DocumentChange:
        # Fields this release does not know (written by a newer one in a rolling upgrade) are dropped.
        known = {f.name for f in fields(cls)}
        return cls(**{**{k: v for k, v in data.items() if k in known}, "op": Op(data["op"])})


@dataclass(frozen=True)
class Chunk:
    """A chunk of a parsed document before embedding: its text and structural metadata."""

    text: str
    index: int
    section: str | None = None  # prose: the section(s) the chunk holds, ", "-separated when small ones share it
    page: int | None = None
    page_end: int | None = None
    line_start: int | None = None
    line_end: int | None = None
    symbol: str | None = None  # code: the symbol path(s) the chunk holds, e.g. "Session.request"
    chunker: str | None = None  # fingerprint of the chunking rules that made it (headwater.pipeline.chunk)
    title: str | None = None  # prose: the document's title (its first heading)


@dataclass
class ChunkRecord:
    """One Chroma record: deterministic id, text, metadata and, once embedded, its vectors."""

    id: str
    text: str
    metadata: dict[str, Any]
    embedding: list[float] | None = None

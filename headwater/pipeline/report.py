"""What a sync did: per-document outcomes and chunk counts, with the reason for every skip and failure."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from headwater import exit_codes


@dataclass
class SyncReport:
    source_id: str
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    # Documents
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    moved: int = 0
    deleted: int = 0
    skipped: dict[str, str] = field(default_factory=dict)  # uri -> reason
    failed: dict[str, str] = field(default_factory=dict)  # uri -> reason
    # uri -> what went wrong without stopping it (indexed as plain text after its parser failed)
    warnings: dict[str, str] = field(default_factory=dict)
    # Chunks
    chunks_embedded: int = 0  # texts that went through the models
    chunks_reused: int = 0  # new records whose vectors were copied from identical stored chunks
    chunks_unchanged: int = 0
    chunks_written: int = 0
    chunks_deleted: int = 0

    def fail(self, uri: str, reason: str) -> None:
        self.failed[uri] = reason

    def skip(self, uri: str, reason: str) -> None:
        self.skipped[uri] = reason

    def warn(self, uri: str, warnings: tuple[str, ...] | list[str]) -> None:
        if warnings:
            self.warnings[uri] = "; ".join(warnings)

    def finish(self) -> SyncReport:
        self.finished_at = time.time()
        return self

    @property
    def seconds(self) -> float:
        return (self.finished_at or time.time()) - self.started_at

    @property
    def exit_code(self) -> int:
        """0 when every document succeeded, 2 when some failed (the others are still indexed)."""
        return exit_codes.SOME_FAILED if self.failed else exit_codes.OK

    def merge(self, other: SyncReport) -> None:
        """Add another pass's counts into this one (watch mode keeps one running total)."""
        for name in ("added", "updated", "unchanged", "moved", "deleted", "chunks_embedded",
                     "chunks_reused", "chunks_unchanged", "chunks_written", "chunks_deleted"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.skipped.update(other.skipped)
        self.failed.update(other.failed)
        self.warnings.update(other.warnings)

    def to_json(self) -> dict:
        return {**asdict(self), "seconds": round(self.seconds, 3)}

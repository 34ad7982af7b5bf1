"""What a document's change means: every decision the two executors make, made here once.

Embedded mode (headwater.sync.sync_engine) and the fleet (headwater.fleet.steps) execute differently
(one process with threads, or steps in Redis across workers) but decide the same way, by calling
these plain functions: which listed documents need work, which version and timestamp a document
is stored under, when a read document is only touched or is a rename, when the source's own
"not modified" saves the read, what an error while parsing does to a document, and how a
document's end is worded in the report. docs/pipeline-decisions.md lists them with their callers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from headwater.pipeline.document_plan import unchanged_by_version
from headwater.errors import ConfigurationError, PermanentDocumentError, SkippedDocument
from headwater.models import DocumentChange

if TYPE_CHECKING:
    from headwater.store.chroma_store import StoredDocument
    from headwater.pipeline.fetch import FetchedDocument

# How an indexed document is reported (the fleet records it as the document's note).
ADDED, UPDATED, MOVED_FROM, MOVED_TO = "added", "updated", "moved from ", "moved to "


# The listing diff (a full pass) ------------------------------------------------------------------

@dataclass
class ListingDiff:
    """A full listing against what the collection holds: what needs work, what does not, what is gone."""

    todo: list[DocumentChange] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    listed: set[str] = field(default_factory=set)
    gone: list[str] = field(default_factory=list)


def skipped_before(stored: StoredDocument | None, change: DocumentChange, skipped: Mapping[str, str]) -> bool:
    """Whether this very version was skipped by an earlier pass (empty, binary): reading it again changes nothing."""
    return stored is None and change.version is not None and skipped.get(change.uri) == change.version


def diff_listing(listing: Iterable[DocumentChange], stored: Mapping[str, StoredDocument],
                 skipped: Mapping[str, str]) -> ListingDiff:
    """Stream a listing against the stored documents: an unchanged document costs its uri, only changed ones are held.

    Unchanged: the collection holds this version completely, or this version was skipped before.
    `skipped` maps uri -> the version a pass skipped (headwater.pipeline.decisions.SkippedVersions).
    """
    diff = ListingDiff()
    for change in listing:
        diff.listed.add(change.uri)
        doc = stored.get(change.uri)
        if unchanged_by_version(doc, change) or skipped_before(doc, change, skipped):
            diff.unchanged.append(change.uri)
        else:
            diff.todo.append(change)
    diff.gone = [uri for uri in stored if uri not in diff.listed]
    return diff


# One read document ----------------------------------------------------------------------------

def known_version(stored: StoredDocument | None) -> str | None:
    """The version a source may answer "not modified" to (an HTTP 304): only one the collection holds completely."""
    return stored.doc_version if stored is not None and stored.complete else None


def document_version(fetched: FetchedDocument, change: DocumentChange) -> str:
    """The version a document is stored under: the connector's at read time, else the change's, else its bytes' hash."""
    return fetched.version or change.version or fetched.doc_hash


def modified_time(fetched: FetchedDocument, change: DocumentChange) -> float:
    """The document's modification time: the source's, else when the change was observed."""
    return fetched.modified_time or change.observed_at


def is_touch(stored: StoredDocument | None, fetched: FetchedDocument) -> bool:
    """Same bytes as the complete stored copy (a touched or copied-over file): only its version moves."""
    return bool(stored is not None and stored.complete and stored.doc_hash == fetched.doc_hash)


def rename_origin(uri: str, doc_hash: str, stored: StoredDocument | None, vanishing: dict[str, str]) -> str | None:
    """The uri a new document was renamed from: a document leaving in the same pass with the same bytes and suffix.

    `vanishing` maps the content hash of each complete document this pass removes to its uri; a
    match is taken out of it (one rename per vanished document).
    """
    origin = vanishing.get(doc_hash)
    if stored is not None or origin is None or PurePosixPath(origin).suffix != PurePosixPath(uri).suffix:
        return None
    del vanishing[doc_hash]
    return origin


def indexed_as(was_stored: bool, moved_from: str | None = None) -> str:
    """How an indexed document is reported: added, updated, or moved from its old uri."""
    if moved_from:
        return MOVED_FROM + moved_from
    return UPDATED if was_stored else ADDED


# Errors ------------------------------------------------------------------------------------------

def expected_parse_error(exc: Exception) -> bool:
    """Whether a parse error is one Headwater raises on purpose (worded for the user; no traceback to log)."""
    return isinstance(exc, (SkippedDocument, PermanentDocumentError, ConfigurationError))


def parse_failure(exc: Exception) -> tuple[str, str]:
    """What an error while parsing or chunking does to the document: ("skipped" | "failed", reason).

    Not retried in either mode: the same bytes through the same parser raise the same error. An
    unexpected error (a parser bug, a file the library chokes on) fails this document only.
    """
    if isinstance(exc, SkippedDocument):
        return "skipped", str(exc)
    if isinstance(exc, (PermanentDocumentError, ConfigurationError)):  # the latter says how to fix the install
        return "failed", str(exc)
    return "failed", f"unexpected {type(exc).__name__} while parsing; please report it"

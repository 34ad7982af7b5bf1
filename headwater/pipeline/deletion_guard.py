"""A pass deletes only what a complete listing says is gone, and never most of a source by surprise.

An unmounted mount point looks like an empty folder, an NFS hiccup like a folder with half its
files, an expired token like an empty bucket: each would make every document look deleted. A
listing that failed raises (the pass stops with no deletes); a listing that would delete more than
half of a source's documents, or that is empty while the collection holds documents, is refused
unless the user says it is meant (--allow-mass-delete).
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from typing import Any

from headwater.errors import ConfigurationError


class MassDeleteRefused(ConfigurationError):
    """The pass would delete most of a source; nothing was deleted."""


def check_deletions(source_id: str, stored: int, deleting: int, listed: int, allowed: bool) -> None:
    """Raise MassDeleteRefused when a pass would empty or mostly empty a source, unless allowed."""
    if allowed or deleting == 0:
        return
    if listed == 0:
        raise MassDeleteRefused(
            f"source {source_id} lists no documents but the collection holds {stored} of its documents; nothing "
            "was deleted. Check that the folder is mounted and readable; if it really is empty now, run the "
            "sync again with --allow-mass-delete")
    if deleting * 2 > stored:
        raise MassDeleteRefused(
            f"this pass would delete {deleting} of the {stored} documents of source {source_id} (more than half); "
            "nothing was deleted. Check that the source is complete and readable; if the deletions are meant, "
            "run the sync again with --allow-mass-delete")


def likely_deletions(stored: Mapping[str, Any], listed: Container[str], changed: Iterable[Any]) -> int:
    """Stored documents the listing lacks, less those whose version reappears under a new uri (renames).

    `listed` holds every listed uri, `changed` at least the listed documents that are not stored.
    """
    new_versions = {change.version for change in changed if change.uri not in stored}
    return sum(1 for uri, doc in stored.items() if uri not in listed and doc.doc_version not in new_versions)

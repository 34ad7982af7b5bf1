"""The decisions both executors call (headwater.pipeline.decisions), on their own: no services."""

from __future__ import annotations

from headwater.pipeline import decisions
from headwater.store.chroma_store import StoredDocument
from headwater.errors import ConfigurationError, PermanentDocumentError, SkippedDocument
from headwater.store.manifest import ManifestEntry
from headwater.models import DocumentChange, Op
from headwater.pipeline.fetch import FetchedDocument


def stored(uri: str, version: str = "v1", doc_hash: str = "h1", complete: bool = True) -> StoredDocument:
    # Incomplete here: cut by other chunking rules than today's (a pass must read it again).
    entry = ManifestEntry("s", uri, doc_version=version, doc_hash=doc_hash, ids=[f"{uri}#0"],
                          chunker="today" if complete else "older rules")
    return StoredDocument.from_entry(entry, chunker="today")


def change(uri: str, version: str | None = "v1") -> DocumentChange:
    return DocumentChange("s", uri, Op.UPSERT, version=version)


def test_the_listing_diff_keeps_only_what_needs_work_and_finds_what_is_gone() -> None:
    held = {"same.md": stored("same.md"), "edited.md": stored("edited.md"), "gone.md": stored("gone.md"),
            "cut-short.md": stored("cut-short.md", complete=False)}
    listing = [change("same.md"), change("edited.md", "v2"), change("cut-short.md"), change("new.md"),
               change("empty.md", "v7"), change("empty-again.md", "v8"), change("unversioned.md", None)]
    diff = decisions.diff_listing(iter(listing), held, {"empty.md": "v7", "empty-again.md": "v7"})
    assert diff.unchanged == ["same.md", "empty.md"]  # held completely at this version, or skipped at it
    assert [c.uri for c in diff.todo] == ["edited.md", "cut-short.md", "new.md", "empty-again.md", "unversioned.md"]
    assert diff.gone == ["gone.md"]
    assert diff.listed == {c.uri for c in listing}


def test_a_skipped_version_does_not_hide_a_document_the_collection_holds() -> None:
    assert not decisions.skipped_before(stored("a.md", "v2"), change("a.md", "v1"), {"a.md": "v1"})
    assert decisions.skipped_before(None, change("a.md", "v1"), {"a.md": "v1"})
    assert not decisions.skipped_before(None, change("a.md", None), {"a.md": "v1"})


def test_only_a_complete_copy_may_be_answered_not_modified() -> None:
    assert decisions.known_version(stored("a.md", "etag-1")) == "etag-1"
    assert decisions.known_version(stored("a.md", "etag-1", complete=False)) is None
    assert decisions.known_version(None) is None


def test_version_time_and_touch() -> None:
    fetched = FetchedDocument("a.md", b"x", "h1", modified_time=None, version=None)
    observed = change("a.md", "listed")
    assert decisions.document_version(fetched, observed) == "listed"
    assert decisions.document_version(fetched, change("a.md", None)) == "h1"
    assert decisions.modified_time(fetched, observed) == observed.observed_at
    assert decisions.is_touch(stored("a.md", doc_hash="h1"), fetched)
    assert not decisions.is_touch(stored("a.md", doc_hash="h1", complete=False), fetched)
    assert not decisions.is_touch(stored("a.md", doc_hash="h2"), fetched)
    assert not decisions.is_touch(None, fetched)


def test_a_rename_is_a_new_document_with_the_bytes_and_suffix_of_a_removed_one_once() -> None:
    vanishing = {"h1": "old.md", "h2": "old.txt"}
    assert decisions.rename_origin("new.md", "h1", stored("new.md"), vanishing) is None  # not new: an edit
    assert decisions.rename_origin("new.pdf", "h1", None, vanishing) is None  # another kind of file
    assert decisions.rename_origin("new.md", "h1", None, vanishing) == "old.md"
    assert decisions.rename_origin("copy.md", "h1", None, vanishing) is None  # one rename per removed document
    assert decisions.indexed_as(False, "old.md") == "moved from old.md"
    assert (decisions.indexed_as(True), decisions.indexed_as(False)) == ("updated", "added")


def test_what_a_parse_error_does() -> None:
    assert decisions.parse_failure(SkippedDocument("empty file (0 bytes)")) == ("skipped", "empty file (0 bytes)")
    assert decisions.parse_failure(PermanentDocumentError("not a readable PDF")) == ("failed", "not a readable PDF")
    assert decisions.parse_failure(ConfigurationError("run scripts/install.sh")) == ("failed", "run scripts/install.sh")
    assert decisions.parse_failure(KeyError("x")) == ("failed", "unexpected KeyError while parsing; please report it")
    assert decisions.parse_failure(TypeError("x")) == ("failed", "unexpected TypeError while parsing; please report it")

"""Fetch stage: a change's bytes from its connector, with each way that can fail named for the user."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from connectors.base import Reader
from headwater.errors import DocumentUnchanged, DocumentVanished, PermanentDocumentError, RetryableError
from headwater.ids import bytes_hash


@dataclass(frozen=True)
class FetchedDocument:
    uri: str
    data: bytes
    doc_hash: str
    modified_time: float | None
    version: str | None = None  # the connector's fingerprint at read time, when it has one
    url: str | None = None  # the source's own address of the document, when it has one
    metadata: dict[str, Any] | None = None  # the connector's document metadata (connectors.base.DocumentStat)
    mime_type: str | None = None  # what the connector says the bytes are (a web page's Content-Type)


def fetch_document(reader: Reader, uri: str, max_bytes: int, known_version: str | None = None) -> FetchedDocument:
    """Read a document through its connector; raises the typed errors in headwater.errors.

    A connector may decline a document (SkippedDocument: over its own size limit, say); that passes through.
    With `known_version` (what the collection holds), a connector whose stat already says that
    version is current (a web page answering 304) is not read: DocumentUnchanged.
    """
    try:
        stat = reader.stat(uri)
        if known_version is not None and stat.version == known_version:
            raise DocumentUnchanged(f"still version {known_version}")
        if stat.size > max_bytes:
            raise PermanentDocumentError(
                f"{stat.size / 1048576:.1f} MB is above the {max_bytes / 1048576:.0f} MB limit; raise "
                "HEADWATER_MAX_DOCUMENT_MB or exclude the file")
        data = reader.read(uri, max_bytes + 1)
    except FileNotFoundError:
        raise DocumentVanished("removed before it could be read; its chunks are removed too") from None
    except PermissionError:
        raise PermanentDocumentError(
            "permission denied; give the user running Headwater read access or exclude the file") from None
    except IsADirectoryError:
        raise DocumentVanished("replaced by a directory before it could be read") from None
    except (TimeoutError, ConnectionError) as exc:
        raise RetryableError(f"could not be read ({type(exc).__name__}); it will be retried") from None
    except OSError as exc:
        raise PermanentDocumentError(f"could not be read ({exc.strerror or type(exc).__name__})") from None
    if len(data) > max_bytes:  # grew between stat and read
        raise PermanentDocumentError(
            f"larger than the {max_bytes / 1048576:.0f} MB limit; raise HEADWATER_MAX_DOCUMENT_MB or exclude the file")
    return FetchedDocument(uri=uri, data=data, doc_hash=bytes_hash(data), modified_time=stat.modified_time,
                           version=stat.version, url=stat.url, metadata=stat.metadata, mime_type=stat.mime_type)

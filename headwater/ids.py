"""Deterministic identity: the same content from the same place always gets the same id."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def content_hash(text: str) -> str:
    """Hash of a chunk's text, shared by identical chunks anywhere (used to reuse embeddings)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def bytes_hash(data: bytes) -> str:
    """Hash of a document's raw bytes: its content version."""
    return hashlib.sha256(data).hexdigest()


def chunk_ids(source_id: str, uri: str, texts: Iterable[str]) -> list[str]:
    """Ids for a document's chunks from (source, uri, content); repeats of one text get distinct ids."""
    seen: dict[str, int] = {}
    ids = []
    for text in texts:
        occurrence = seen.get(text, 0)
        seen[text] = occurrence + 1
        key = f"{source_id}\x00{uri}\x00{occurrence}\x00{text}".encode("utf-8")
        ids.append(hashlib.sha256(key).hexdigest()[:32])
    return ids

"""The configured collection, opened with what the pipeline knows: its chunker's fingerprint and the index settings.

The store itself knows nothing of chunking; a stored document cut by other chunking rules reads as
incomplete, so every pass opens the collection through here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from headwater.settings import Settings
from headwater.store.chroma_store import ChromaStore, make_client, missing_embedded_store


def open_store(settings: Settings, *, fleet: bool = False, **options: Any) -> ChromaStore:
    """The configured target and collection, with the configured batch size, Cloud write cap and chunker."""
    from headwater.pipeline.chunk import chunker_fingerprint  # loads the tokenizer: only when a store opens

    if not settings.is_remote and not options.get("create", True) and not Path(settings.chroma_path).is_dir():
        # Opening a client there would create an empty database at a mistyped path.
        raise missing_embedded_store(settings.chroma_path)
    options.setdefault("chunker", chunker_fingerprint(settings))
    options.setdefault("hnsw", settings.hnsw(settings.collection))
    return ChromaStore(make_client(settings, fleet=fleet), settings.collection, batch_size=settings.upsert_batch_size,
                       cloud=settings.is_cloud, single_writer=not settings.is_remote, **options)

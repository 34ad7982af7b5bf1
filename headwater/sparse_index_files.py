"""Where an embedded collection keeps its sparse index, and opening it: loaded if it matches, else rebuilt.

Apart from headwater.embedded (the writer's pipeline) so that a reader, such as `headwater query`,
opens the index without importing the sync engine, and imports scipy only when it opens one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from headwater.settings import Settings

if TYPE_CHECKING:
    from headwater.chroma_store import ChromaStore
    from headwater.sparse_index import SparseIndex


def sparse_index_dir(settings: Settings) -> Path | None:
    """Where an embedded collection's sparse index is kept (next to the Chroma files); None for servers."""
    if settings.chroma_host or settings.is_cloud:
        return None
    return Path(settings.chroma_path) / "headwater-sparse" / settings.collection


def open_sparse_index(store: ChromaStore, directory: Path | None, *, save: bool) -> SparseIndex:
    """The persisted index if it matches the collection, else one rebuilt from the collection."""
    from headwater.sparse_index import SparseIndex

    index = SparseIndex.load(directory) if directory else None
    if index is None or len(index) != store.count():
        # A reader rebuilds in memory: only the writer (holding the lock) may touch the directory.
        index = SparseIndex.rebuild(store.collection, directory if save else None)
        if save:
            index.persist()
    return index

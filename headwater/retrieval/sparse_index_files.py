"""Where an embedded collection keeps its sparse index, and opening it: loaded if it matches, else rebuilt.

Apart from headwater.sync.embedded (the writer's pipeline) so that a reader, such as `headwater query`,
opens the index without importing the sync engine, and imports scipy only when it opens one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from headwater.settings import Settings

if TYPE_CHECKING:
    from headwater.store.chroma_store import ChromaStore
    from headwater.retrieval.sparse_index import SparseIndex


def sparse_index_dir(settings: Settings) -> Path | None:
    """Where an embedded collection's sparse index is kept (next to the Chroma files); None for servers."""
    if settings.is_remote:
        return None
    return Path(settings.chroma_path) / "headwater-sparse" / settings.collection


def open_sparse_index(store: ChromaStore, directory: Path | None, *, save: bool) -> SparseIndex:
    """The persisted index if it matches the collection, else one rebuilt from the collection."""
    from headwater.retrieval.sparse_index import SparseIndex

    index = SparseIndex.load(directory) if directory else None
    if index is None or not holds_the_collection(index, store):
        # A reader rebuilds in memory: only the writer (holding the lock) may touch the directory.
        index = SparseIndex.rebuild(store.collection, directory if save else None)
        if save:
            index.persist()
    return index


def holds_the_collection(index: SparseIndex, store: ChromaStore) -> bool:
    """Whether a saved index holds as many rows as the collection holds records.

    A saved index can fall behind its collection without knowing: records written by something
    other than Headwater, or by a release that kept no index. Counting the collection catches
    that, but costs Chroma ~0.5 s at 200,000 records, more than the rest of a pass that changed a
    few documents. A pass has just read every document of its source (from the manifest, whose
    complete entries name each document's chunks, or from the chunks), so when the index holds no
    other source, the index's rows of that source are compared with those documents' chunks:
    the same check, per source, from what the pass read anyway. Otherwise, the count.
    """
    known = dict(store.source_chunks)  # forgotten at the first write: then it would be stale
    if known:
        held = index.live_rows_by_source()
        if held.keys() <= known.keys():
            return all(held.get(source, 0) == chunks for source, chunks in known.items())
    return len(index) == store.count()

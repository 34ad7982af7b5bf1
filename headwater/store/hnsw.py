"""A collection's dense index settings (Chroma's HNSW): set when it is created, search ef kept current.

Chroma fixes a collection's space, links per node (M) and construction ef when the collection is
created; its search ef can be changed later. So the configured settings shape every new
collection, an existing collection gets the configured search ef, and a difference in the fixed
ones is reported (with the way to apply them: a new collection) instead of silently ignored.
"""

from __future__ import annotations

import logging
from typing import Any

from headwater.settings import HnswConfig

log = logging.getLogger(__name__)


def vector_index_config(hnsw: HnswConfig) -> Any:
    """The schema entry that creates a collection's dense index with these settings."""
    from chromadb.api.types import HnswIndexConfig, VectorIndexConfig

    return VectorIndexConfig(space=hnsw.space, embedding_function=None,
                             hnsw=HnswIndexConfig(max_neighbors=hnsw.m, ef_construction=hnsw.construction_ef,
                                                  ef_search=hnsw.search_ef))


def current(collection: Any) -> HnswConfig | None:
    """The settings the collection was created with (and its current search ef); None when it has no HNSW."""
    found = (collection.configuration or {}).get("hnsw")
    if not found:
        return None
    return HnswConfig(space=found["space"], m=found["max_neighbors"], construction_ef=found["ef_construction"],
                      search_ef=found["ef_search"])


def apply(collection: Any, wanted: HnswConfig) -> None:
    """Give an existing collection the configured search ef; report fixed settings that differ."""
    have = current(collection)
    if have is None:
        return
    fixed = [f"{name} {getattr(have, name)} (configured {getattr(wanted, name)})"
             for name in ("space", "m", "construction_ef") if getattr(have, name) != getattr(wanted, name)]
    if fixed:
        log.warning("collection %r keeps the HNSW settings it was created with: %s; they apply to new "
                    "collections only (sync into a new collection to use them)", collection.name, ", ".join(fixed))
    if have.search_ef != wanted.search_ef:
        collection.modify(configuration={"hnsw": {"ef_search": wanted.search_ef}})

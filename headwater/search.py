"""Queries over a synced collection."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from headwater import chroma_store as keys
from headwater.chroma_store import ChromaStore
from workers.embed_dense import DenseEmbedder


@dataclass(frozen=True)
class SearchHit:
    id: str
    uri: str
    text: str
    score: float
    metadata: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def dense_search(store: ChromaStore, dense: DenseEmbedder, text: str, k: int = 5,
                 where: dict[str, Any] | None = None) -> list[SearchHit]:
    """Nearest chunks by MiniLM cosine similarity (score = 1 - cosine distance)."""
    if not text.strip():
        raise ValueError("the query is empty")
    vector = dense.embed([text])[0].tolist()
    result = store.collection.query(query_embeddings=[vector], n_results=k, where=where,
                                    include=["documents", "metadatas", "distances"])
    hits = []
    for record_id, doc, metadata, distance in zip(result["ids"][0], result["documents"][0],
                                                  result["metadatas"][0], result["distances"][0]):
        shown = {k: v for k, v in metadata.items() if k != keys.SPARSE}
        hits.append(SearchHit(record_id, metadata.get(keys.URI, ""), doc, round(1.0 - distance, 6), shown))
    return hits

"""Headwater: keep data sources in sync with a Chroma collection."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from headwater.retrieval.searcher import DocumentHit, SearchHit, Searcher
    from headwater.settings import Settings


def search(text: str, k: int = 10, mode: str = "auto", *, source_id: str | None = None,
           uri_prefix: str | None = None, where: dict[str, Any] | None = None, rrf_k: int | None = None,
           dense_weight: float | None = None, sparse_weight: float | None = None, settings: Settings | None = None,
           searcher: Searcher | None = None, group_by: str = "document") -> list[DocumentHit] | list[SearchHit]:
    """Search the synced collection; the same results as `headwater query` (one hit per document, in the collection's default mode).

    mode "auto" is hybrid for a collection of mostly source code and dense for prose (docs/search.md);
    group_by="chunk" returns chunks (SearchHit) instead of documents (DocumentHit: the best chunk,
    the other matching chunks and each side's rank). The fusion parameters default to
    headwater.retrieval.searcher's RRF_K, DENSE_WEIGHT and SPARSE_WEIGHT.
    """
    from headwater.retrieval.searcher import Filters
    from headwater.settings import load_settings

    searcher = searcher or _searcher_for(settings or load_settings())
    fusion = {name: value for name, value in
              (("rrf_k", rrf_k), ("dense_weight", dense_weight), ("sparse_weight", sparse_weight)) if value is not None}
    return searcher.search(text, k=k, mode=mode, filters=Filters(source_id, uri_prefix, where),  # type: ignore[arg-type]
                           group_by=group_by, **fusion)  # type: ignore[arg-type]


def _searcher_for(settings: Settings) -> Searcher:
    # Loading the two models takes seconds, so the convenience function keeps one Searcher per
    # configuration for the life of the process; pass `searcher=` to manage it yourself.
    key = settings.model_dump_json(exclude={"chroma_token"})
    if key not in _SEARCHERS:
        from headwater.retrieval.searcher import open_searcher

        _SEARCHERS[key] = open_searcher(settings)
    return _SEARCHERS[key]


_SEARCHERS: dict[str, Searcher] = {}

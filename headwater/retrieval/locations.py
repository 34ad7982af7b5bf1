"""Where a record lies: the uri-prefix test that the search filters and the derived index share.

Kept apart from headwater.retrieval.sparse_index so that a dense query can test locations without importing
scipy (which the index needs).
"""

from __future__ import annotations


def uri_under(uri: str, prefix: str) -> bool:
    """Whether `uri` is `prefix` or lies below it, at whole path segments ("ops" holds "ops/a", not "opsx")."""
    return uri == prefix or (uri.startswith(prefix) and uri[len(prefix):len(prefix) + 1] == "/")

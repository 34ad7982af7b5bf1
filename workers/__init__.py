"""Pipeline stages: fetch, parse + chunk, embed (dense, sparse), upsert. Plain functions; tasks wrap them."""

import headwater.offline  # noqa: F401  (before any stage imports unstructured or transformers)

"""The pipeline: one plain function per stage (fetch, parse, chunk, embed, write) and the decisions both modes share.

A document's change goes fetch -> parse -> chunk -> embed (dense and sparse) -> write. Every stage
here is a plain function or a small class with no knowledge of Celery, Redis or HTTP: embedded mode
(headwater.sync) calls them in one process and the fleet (headwater.fleet, run by workers/) calls
them one step per task. What a change means for the collection (versions, touches, renames,
skips, failures and the writes that record them, and which URLs a crawl takes in) is decided here
once, in decisions, document_plan, outcomes and discovery, so the two modes cannot drift apart.
"""

import headwater.offline  # noqa: F401  (before any stage imports unstructured or transformers)

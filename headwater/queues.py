"""Queue and task names, spelled in this one place (workers/README.md says which pool serves which)."""

SYNC_QUEUE = "headwater.sync"  # listing, finishing runs and the sweeper: cheap, I/O bound
FETCH_QUEUE = "headwater.fetch"  # reading documents from their source: network bound
PARSE_QUEUE = "headwater.parse"  # unstructured + chunking + planning: CPU bound
EMBED_SPARSE_QUEUE = "headwater.embed.sparse"  # SPLADE
EMBED_DENSE_QUEUE = "headwater.embed.dense"  # MiniLM: the pool that moves to GPU nodes
UPSERT_QUEUE = "headwater.upsert"  # batched writes to Chroma
CONSOLIDATE_QUEUE = "headwater.consolidate"  # dedupe and knowledge upkeep: an LLM's pool, off the write path
ALL_QUEUES = (SYNC_QUEUE, FETCH_QUEUE, PARSE_QUEUE, EMBED_SPARSE_QUEUE, EMBED_DENSE_QUEUE, UPSERT_QUEUE,
              CONSOLIDATE_QUEUE)

LIST_SOURCE = "headwater.list_source"
FETCH = "headwater.fetch_document"
PARSE = "headwater.parse_document"
EMBED_SPARSE = "headwater.embed_sparse"
EMBED_DENSE = "headwater.embed_dense"
FLUSH = "headwater.flush_upserts"
FINISH = "headwater.finish_run"
SWEEP = "headwater.sweep"
CONSOLIDATE = "headwater.consolidate_collection"
CONSOLIDATE_SWEEP = "headwater.consolidate_sweep"

ROUTES = {
    LIST_SOURCE: SYNC_QUEUE, FINISH: SYNC_QUEUE, SWEEP: SYNC_QUEUE, FETCH: FETCH_QUEUE, PARSE: PARSE_QUEUE,
    EMBED_SPARSE: EMBED_SPARSE_QUEUE, EMBED_DENSE: EMBED_DENSE_QUEUE, FLUSH: UPSERT_QUEUE,
    CONSOLIDATE: CONSOLIDATE_QUEUE, CONSOLIDATE_SWEEP: CONSOLIDATE_QUEUE,
}

"""Search over a synced collection: dense, sparse (the derived SPLADE index) and hybrid fusion.

searcher answers queries (what `headwater.search`, `headwater query` and the API call);
sparse_index and its files keep the derived inverted index over the SPLADE vectors stored in the
collection (a cache that can always be rebuilt from the collection); write_log keeps a server's
index current by following writers; filtered_dense and locations serve filtered dense search.
"""

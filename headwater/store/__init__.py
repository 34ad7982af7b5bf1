"""Where records live: the Chroma client and collection schema, the per-document manifest, promotion, and durable records.

chroma_store opens a collection with its schema and writes bounded batches; manifest keeps one
small record per document so a pass reads what changed in O(documents); promotion copies an
embedded collection to a server or Cloud; source_store and source_cursors keep the HTTP app's
sources, run history and per-source cursors. Nothing here parses, embeds or searches.
"""

"""Consolidation: find duplicate, overlapping and superseding chunks across a collection's sources and
keep a knowledge collection next to the data, with provenance back to every chunk.

Stage 1 (`stage1`) settles exact and near copies without an LLM; stage 2 (`llm`, `decision`) asks an
LLM about the related-but-not-identical pairs; `knowledge` writes the result; `consolidator` runs a
pass. Nothing here changes a source chunk's text or deletes source data.
"""

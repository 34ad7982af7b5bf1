"""Heavy imports done once in a worker's main process, before its pool forks.

A pool child that replaces a killed one (OOM, SIGKILL) then starts in about a second instead of
spending several re-importing onnxruntime, spaCy and unstructured (not torch: both models run on
onnxruntime; torch only exports SPLADE once, at install time). Imports only: no model runs
and no thread pool starts before the fork, so the children stay fork-safe.
"""

from __future__ import annotations

import importlib
import logging

log = logging.getLogger(__name__)
MODULES = ("onnxruntime", "tokenizers", "spacy", "unstructured.partition.auto",
           "unstructured.partition.md", "unstructured.partition.text", "unstructured.partition.html",
           "tree_sitter", "headwater.fleet.steps", "headwater.pipeline.embed_dense", "headwater.pipeline.embed_sparse", "headwater.pipeline.code_chunks",
           "headwater.pipeline.tokens")


def heavy_imports() -> None:
    """Import what every step needs sooner or later; a missing optional module is only logged."""
    for name in MODULES:
        try:
            importlib.import_module(name)
        except ImportError as exc:  # the step that needs it reports it properly
            log.warning("could not preload %s: %s", name, exc)

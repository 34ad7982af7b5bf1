"""The embedded pipeline end to end: real parsers, real models, a real embedded Chroma."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from headwater.store.sparse_codec import decode_sparse
from connectors.folder import FolderConnector
from headwater.pipeline.chunk import chunk_document
from headwater.pipeline.parse import parse_document

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

FORMATS = {".md", ".txt", ".html", ".csv", ".json", ".eml", ".py", ".pdf", ".docx", ".pptx"}


def test_first_sync_indexes_every_supported_format(harness, sample):
    report = harness.sync()
    files = sorted(p.relative_to(sample).as_posix() for p in sample.rglob("*") if p.is_file())
    assert {p.rsplit(".", 1)[-1] for p in files} >= {f.lstrip(".") for f in FORMATS}
    assert not report.failed and not report.skipped
    records = harness.records()
    assert sorted(records) == files
    assert report.added == len(files)
    assert report.chunks_written == report.chunks_embedded == sum(len(r) for r in records.values())
    pdf = list(records["report.pdf"].values())
    assert {m["page"] for m in pdf} >= {1} and all(m["mime_type"] == "application/pdf" for m in pdf)
    code = list(records["chunk_sizes.py"].values())
    assert all(m["parser"] == "text" and m["line_start"] >= 1 for m in code)
    assert any(m.get("symbol") for m in code)  # Python is chunked along its syntax
    assert len({m["chunker"] for metadata in records.values() for m in metadata.values()}) == 1
    titled = [m for m in records["ops/runbook.md"].values() if m.get("section")]
    # A small section shares its chunk with its neighbours; the chunk names every section it holds.
    assert "Rotating the Chroma token" in {s for m in titled for s in m["section"].split(", ")}
    assert {m["title"] for m in records["ops/runbook.md"].values()} == {"Operations runbook"}
    for metadata in pdf + code:
        assert {"source_id", "uri", "doc_version", "content_hash", "chunk_index", "modified_time"} <= set(metadata)
        indices, values = decode_sparse(metadata["sparse_vector"])
        assert indices.size > 0 and (values > 0).all()


def test_second_sync_embeds_nothing(harness):
    harness.sync()
    embedded_before = harness.dense.texts_embedded
    writes_before = len(harness.writes)
    report = harness.sync()
    assert report.chunks_embedded == 0 and harness.dense.texts_embedded == embedded_before
    assert report.added == report.updated == report.moved == report.deleted == 0 and report.unchanged > 0
    assert len(harness.writes) == writes_before  # not even a metadata write


def test_unchanged_content_with_new_timestamps_embeds_nothing(harness, sample, make_harness, tmp_path):
    """A fresh copy on another machine: every mtime differs, nothing is parsed or embedded."""
    harness.sync()
    copy = tmp_path / "copy"
    shutil.copytree(sample, copy, copy_function=shutil.copyfile)  # new mtimes
    again = make_harness(copy)  # a new engine pointing at the same Chroma
    embedded_before = again.dense.texts_embedded
    report = again.sync()
    assert report.chunks_embedded == 0 and again.dense.texts_embedded == embedded_before
    assert report.added == report.updated == 0 and not report.failed


def test_editing_one_paragraph_re_embeds_only_changed_chunks(make_harness, tmp_path):
    root = tmp_path / "long"
    root.mkdir()
    paragraphs = [f"Paragraph {n} explains how Headwater handles case {n}. It covers retries, batching, "
                  f"deletes and the order in which stage {n % 5} runs when source {n % 7} changes." for n in range(60)]
    document = root / "guide.md"
    document.write_text("# Guide\n\n" + "\n\n".join(paragraphs) + "\n")
    h = make_harness(root)
    first = h.sync()
    assert first.chunks_embedded >= 10
    paragraphs[30] = paragraphs[30].replace("retries", "retries with exponential backoff and jitter")
    document.write_text("# Guide\n\n" + "\n\n".join(paragraphs) + "\n")

    settings = h.settings
    def chunk_texts():
        parsed = parse_document("guide.md", document.read_bytes())
        return {c.text for c in chunk_document(parsed, "guide.md", settings)}
    stored_texts = set(h.store.collection.get(include=["documents"])["documents"])
    expected_new = chunk_texts() - stored_texts
    before = h.dense.texts_embedded
    report = h.sync()
    assert report.updated == 1
    assert report.chunks_embedded == len(expected_new) == h.dense.texts_embedded - before
    assert 1 <= report.chunks_embedded <= 3 < first.chunks_embedded
    assert set(h.store.collection.get(include=["documents"])["documents"]) == chunk_texts()


def test_delete_removes_all_chunks(harness, sample):
    harness.sync()
    (sample / "faq.html").unlink()
    report = harness.sync()
    assert report.deleted == 1 and report.chunks_deleted > 0
    assert "faq.html" not in harness.records()


def test_rename_is_re_chunked_under_the_new_path(harness, sample):
    """Chunk texts start with their document's path, so a renamed document's chunks are new texts."""
    harness.sync()
    old = harness.records()["ops/runbook.md"]
    (sample / "ops" / "runbook.md").rename(sample / "ops" / "operations.md")
    report = harness.sync()
    records = harness.records()
    assert "ops/runbook.md" not in records
    new = records["ops/operations.md"]
    assert report.moved == 1 and report.added == report.deleted == 0 and report.chunks_embedded == len(new)
    assert len(new) == len(old) and set(new).isdisjoint(old)
    got = harness.store.collection.get(ids=list(new), include=["embeddings", "documents"])
    was = harness.store.collection.get(ids=list(old), include=["embeddings"])
    assert was["ids"] == []  # old ids are gone
    assert all(text.startswith("ops/operations.md") for text in got["documents"])
    assert all(np.linalg.norm(e) > 0.99 for e in got["embeddings"])


def test_duplicate_content_reuses_vectors(harness, sample, tmp_path):
    """The same document at the same path in another source has the same chunk texts: nothing is embedded."""
    harness.sync()
    mirror = tmp_path / "mirror"
    shutil.copytree(sample, mirror)
    report = harness.engine.sync(FolderConnector("mirror", mirror))
    assert report.added > 0 and report.chunks_embedded == 0 and report.chunks_reused > 0


def test_documents_chunked_with_other_settings_are_re_chunked_by_the_next_sync(harness, sample, make_harness):
    first = harness.sync()
    assert first.added > 0
    resized = make_harness(sample, chunk_min_tokens=40)  # same Chroma, another chunker fingerprint
    report = resized.sync()
    assert report.updated == first.added and report.unchanged == 0
    fingerprints = {m["chunker"] for metadata in resized.records().values() for m in metadata.values()}
    assert fingerprints == {resized.store.chunker} != {harness.store.chunker}
    again = resized.sync()
    assert again.unchanged == first.added and again.chunks_embedded == 0


def test_batches_never_exceed_the_limit(sample, make_harness):
    h = make_harness(sample, upsert_batch_size=7)
    assert h.store.batch_limit == 7
    h.sync()
    for path in list(sample.glob("*.md")):
        path.write_text(path.read_text() + "\n\nAn appended paragraph about batching limits.\n")
    (sample / "faq.html").unlink()
    h.sync()
    assert h.writes and all(size <= 7 for _, size in h.writes)
    assert {op for op, _ in h.writes} >= {"upsert", "delete"}
    assert sum(n for op, n in h.writes if op == "upsert") >= h.store.count()


def test_batch_limit_is_capped_by_chroma_and_4999(sample, make_harness):
    assert make_harness(sample, upsert_batch_size=100_000).store.batch_limit == 4999


def test_sparse_encoder_matches_the_textbook_formulation(sparse):
    """The ONNX export computes what the torch checkpoint does, padded batch and all."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from headwater.pipeline.embed_sparse import packaged_splade_dir

    texts = ["Headwater keeps Chroma in sync.", "Deletes propagate to the collection " * 10]
    fast = sparse.encode(texts)
    tokenizer = AutoTokenizer.from_pretrained(packaged_splade_dir(), local_files_only=True)
    model = AutoModelForMaskedLM.from_pretrained(packaged_splade_dir(), local_files_only=True).eval()
    with torch.inference_mode():
        batch = tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
        assert batch["input_ids"][1][batch["attention_mask"][1] == 1].tolist() == sparse.token_ids(texts)[1]
        logits = model(**batch).logits
        reference = torch.max(torch.log1p(torch.relu(logits)) * batch["attention_mask"].unsqueeze(-1), dim=1).values
    for (indices, values), row in zip(fast, reference.numpy()):
        assert np.array_equal(indices, np.flatnonzero(row))
        assert np.allclose(values, row[indices], atol=1e-5)


def test_sparse_vectors_do_not_depend_on_the_batch(sparse):
    """Stored (float16) encodings are the same whether a text is encoded alone or among others."""
    from headwater.store.sparse_codec import encode_sparse

    texts = [f"Worker {n} retries the upsert of batch {n * 7} when Chroma answers {500 + n}." for n in range(24)]
    texts += [f"Section {n}: " + "the sync engine reads, parses, chunks and embeds every document. " * 12
              for n in range(12)]
    texts += ["short", "a different, somewhat longer text about sparse vectors"]
    lengths = [len(ids) for ids in sparse.token_ids(texts)]
    assert max(lengths.count(n) for n in set(lengths)) >= 8  # texts that a batching encoder would group
    batched = [encode_sparse(indices, values) for indices, values in sparse.encode(texts)]
    alone = [encode_sparse(*sparse.encode([text])[0]) for text in texts]
    assert batched == alone

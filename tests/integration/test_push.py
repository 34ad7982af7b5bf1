"""`headwater push`: an embedded collection copied to a `chroma run` server searches identically.

The 5,000 records carry synthetic dense vectors (embedding 5,000 texts would only slow the test),
but their sparse vectors come from the real SPLADE encoder and their metadata, manifest and model
identities are written the way a sync writes them.
"""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from headwater.store import chroma_store as keys
from headwater.store.chroma_store import ChromaStore
from headwater.pipeline.stores import open_store
from headwater.pipeline.document_plan import DocumentFacts, chunk_metadata
from headwater.errors import ConfigurationError
from headwater.ids import chunk_ids
from headwater.store.manifest import ManifestEntry
from headwater.pipeline.model_identity import dense_identity, sparse_identity
from headwater.store.promotion import PushRefused, Target, push
from headwater.settings import Settings
from headwater.store.sparse_codec import encode_sparse
from tests.services import chroma_server, redis_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

RECORDS = 5_000
CHUNKS_PER_DOCUMENT = 10
WORDS = ("river delta sediment glacier meltwater aquifer spring brook estuary tide pump valve reservoir dam "
         "turbine kayak salmon trout heron willow moss granite basalt limestone canyon ridge summit").split()
QUERIES = ["glacier meltwater in spring", "salmon and trout in the estuary", "granite canyon ridge",
           "reservoir dam turbine valve", "heron by the willow"]


def _texts() -> list[str]:
    rng = random.Random(7)
    return [f"note {n}: " + " ".join(rng.choice(WORDS) for _ in range(12)) for n in range(RECORDS)]


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    """An embedded collection of 5,000 chunks in 500 documents, with its manifest and model identities."""
    from headwater.pipeline.chunk import chunker_fingerprint
    from headwater.pipeline.embed_sparse import SpladeEncoder

    path = tmp_path_factory.mktemp("laptop") / "chroma"
    settings = Settings(chroma_path=path, collection="laptop")
    store = open_store(settings, dense_model=dense_identity(None, settings.dense_int8),
                                      sparse_model=sparse_identity(None))
    texts = _texts()
    sparse = SpladeEncoder(None, 1, settings.onnx_cache_dir).encode(texts)
    # A bag-of-words vector per text (a random direction per word, summed): texts sharing words are
    # near, as with a real model, and the data has the low intrinsic dimension HNSW searches exactly.
    directions = np.random.default_rng(7).standard_normal((len(WORDS), 384))
    vectors = np.array([sum(directions[WORDS.index(w)] for w in text.split(": ", 1)[1].split()) for text in texts],
                       dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids, metadatas, entries = [], [], []
    chunker = chunker_fingerprint(settings)
    from headwater.models import Chunk

    for doc in range(RECORDS // CHUNKS_PER_DOCUMENT):
        uri = f"notes/part-{doc % 7}/doc-{doc}.md"
        part = range(doc * CHUNKS_PER_DOCUMENT, (doc + 1) * CHUNKS_PER_DOCUMENT)
        facts = DocumentFacts("notes", uri, f"v{doc}", hashlib.sha256(uri.encode()).hexdigest(), 1.7e9,
                              "text/markdown", "markdown")
        doc_ids = chunk_ids("notes", uri, [texts[n] for n in part])
        for index, n in enumerate(part):
            metadata = chunk_metadata(facts, Chunk(texts[n], index, section=f"Part {doc % 7}", chunker=chunker),
                                      CHUNKS_PER_DOCUMENT, f"Doc {doc}")
            metadata[keys.SPARSE] = encode_sparse(*sparse[n])
            metadatas.append(metadata)
        ids += doc_ids
        entries.append(ManifestEntry("notes", uri, f"v{doc}", facts.doc_hash, doc_ids, chunker))
    store.upsert(ids, texts, vectors.tolist(), metadatas)
    store.manifest.write(entries)
    store.manifest.mark_covered("notes")
    return settings


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    root = tmp_path_factory.mktemp("server")
    with redis_server(root) as url, chroma_server(root) as (host, port):
        yield url, host, port


def _run_push(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    command = [str(Path(sys.executable).with_name("headwater")), "push", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})


def _all(collection) -> dict[str, tuple]:
    got = collection.get(include=["documents", "embeddings", "metadatas"])
    return {i: (d, m, np.asarray(e, dtype=np.float32))
            for i, d, e, m in zip(got["ids"], got["documents"], got["embeddings"], got["metadatas"])}


def assert_same_records(target, source) -> None:
    """Same ids, texts and metadata (sparse vectors included); dense vectors equal to float32 precision."""
    from headwater.store.promotion import same_vector

    theirs, mine = _all(target), _all(source)
    assert theirs.keys() == mine.keys()
    for record_id, (text, metadata, vector) in mine.items():
        assert theirs[record_id][:2] == (text, metadata), record_id
        assert same_vector(theirs[record_id][2], vector), record_id


def test_push_copies_records_and_searches_identically(embedded, servers, tmp_path):
    from headwater.retrieval.searcher import Filters, open_searcher

    redis_url, host, port = servers
    done = _run_push("--from-path", str(embedded.chroma_path), "--collection", "laptop", "--to", f"{host}:{port}",
                     "--to-collection", "production", env={"HEADWATER_REDIS_URL": redis_url})
    assert done.returncode == 0, done.stderr
    assert "5000 records written" in done.stdout

    server = Settings(chroma_host=host, chroma_port=port, collection="production", redis_url=redis_url,
                      sparse_index_dir=tmp_path / "index")
    source, target = open_store(embedded, create=False), open_store(server, create=False)
    assert_same_records(target.collection, source.collection)  # records, vectors, metadata, sparse vectors
    assert target.collection.metadata[keys.DENSE_MODEL_KEY] == source.collection.metadata[keys.DENSE_MODEL_KEY]
    assert target.collection.metadata[keys.SPARSE_MODEL_KEY] == source.collection.metadata[keys.SPARSE_MODEL_KEY]
    assert target.collection.configuration["hnsw"] == source.collection.configuration["hnsw"]
    assert target.manifest.covers("notes")
    assert ({e.uri: e for e in target.manifest.entries("notes")} == {e.uri: e for e in source.manifest.entries("notes")})

    here, there = open_searcher(embedded), open_searcher(server)
    for query in QUERIES:
        for mode in ("hybrid", "dense", "sparse"):
            mine = [(h.id, round(h.score, 5)) for h in here.search(query, k=10, mode=mode)]
            theirs = [(h.id, round(h.score, 5)) for h in there.search(query, k=10, mode=mode)]
            assert mine == theirs, (query, mode)
    only = Filters("notes", "notes/part-3")
    assert ([h.id for h in here.search(QUERIES[0], k=10, filters=only)]
            == [h.id for h in there.search(QUERIES[0], k=10, filters=only)])

    again = push(embedded.chroma_path, "laptop", Target(host=host, port=port), "production")
    assert (again.copied, again.already_there, again.target_records) == (0, RECORDS, RECORDS)


def test_an_interrupted_push_resumes_where_it_stopped(embedded, servers):
    _, host, port = servers
    target = Target(host=host, port=port)

    class Interrupted(Exception):
        pass

    def stop_after_two_batches(done: int, total: int) -> None:
        if done >= 2000:
            raise Interrupted  # as if the process had been stopped after its second write

    with pytest.raises(Interrupted):
        push(embedded.chroma_path, "laptop", target, "resumed", batch_size=1000, progress=stop_after_two_batches)
    held = ChromaStore(target.client(), "resumed", create=False)
    assert held.count() == 2000
    assert held.manifest.collection.count() == 0  # entries follow their chunks: none yet

    report = push(embedded.chroma_path, "laptop", target, "resumed", batch_size=1000)
    assert (report.already_there, report.copied, report.target_records) == (2000, RECORDS - 2000, RECORDS)
    assert report.sampled == 200 and report.batch_limit == 1000
    assert_same_records(held.collection, open_store(embedded, create=False).collection)


def test_a_changed_record_is_rewritten_and_a_deleted_one_pruned(embedded, servers, tmp_path):
    _, host, port = servers
    target = Target(host=host, port=port)
    push(embedded.chroma_path, "laptop", target, "pruned")
    held = ChromaStore(target.client(), "pruned", create=False)
    some = held.collection.get(limit=2, include=["metadatas"])
    held.collection.update(ids=[some["ids"][0]], metadatas=[{keys.DOC_VERSION: "edited on the server"}])
    held.collection.add(ids=["stray"], embeddings=[[0.0] * 384], documents=["not in the source"])

    from headwater.store.promotion import PushVerificationFailed

    with pytest.raises(PushVerificationFailed, match="--prune"):
        push(embedded.chroma_path, "laptop", target, "pruned")
    report = push(embedded.chroma_path, "laptop", target, "pruned", prune=True)
    assert (report.copied, report.pruned, report.target_records) == (0, 1, RECORDS)  # the first run rewrote it
    assert held.collection.get(ids=[some["ids"][0]])["metadatas"][0][keys.DOC_VERSION] == some["metadatas"][0][keys.DOC_VERSION]


def test_a_target_written_by_other_models_is_refused(embedded, servers):
    _, host, port = servers
    target = Target(host=host, port=port)
    ChromaStore(target.client(), "other-models", dense_model="some-other-model@0123456789ab",
                sparse_model=sparse_identity(None))
    with pytest.raises(PushRefused, match="other-models.*some-other-model"):
        push(embedded.chroma_path, "laptop", target, "other-models")
    done = _run_push("--from-path", str(embedded.chroma_path), "--collection", "laptop", "--to", f"{host}:{port}",
                     "--to-collection", "other-models")
    assert done.returncode == 1 and "mixing models" in done.stderr.replace("\n", " ")

    unknown = target.client().get_or_create_collection("unknown-origin", embedding_function=None)
    unknown.add(ids=["x"], embeddings=[[0.0] * 384])
    with pytest.raises(PushRefused, match="no Headwater sync recorded"):
        push(embedded.chroma_path, "laptop", target, "unknown-origin")


def test_bad_targets_and_sources_say_what_to_do(tmp_path, embedded):
    with pytest.raises(ConfigurationError, match="HOST:PORT"):
        Target.parse("chroma:port")
    with pytest.raises(ConfigurationError, match="HEADWATER_CHROMA_CLOUD_API_KEY"):
        Target.parse("cloud")
    assert Target.parse("chroma.internal").port == 8000
    with pytest.raises(ConfigurationError, match="no embedded Chroma"):
        push(tmp_path / "nothing", "laptop", Target(host="127.0.0.1", port=1))
    with pytest.raises(ConfigurationError, match="holds no collection 'nope'.*laptop"):
        push(embedded.chroma_path, "nope", Target(host="127.0.0.1", port=1))

"""Dense vectors from an OpenAI-compatible endpoint: llama.cpp's server on loopback (tests/integration/embedding_service.py).

Requests carry one text each (HEADWATER_DENSE_ENDPOINT_BATCH_SIZE=1), so every stored vector can be
compared, to float32 rounding, with what the service answers for that text alone: llama.cpp's batched decoding
moves vectors by about 0.2% when texts share a request.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.integration.embedding_service import (MODEL_ALIAS, FaultyProxy, llama_embedding_server,
                                                 service_vectors)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

KEY_ENV = "HEADWATER_TEST_EMBEDDING_KEY"
KEY = "sk-test-0123456789abcdef"  # what llama.cpp's server is started with; never in an error or a log
TOPICS = ("Rotating the deployment token", "Restoring the Chroma server from a snapshot",
          "Adding a folder source", "Sizing the embedding pool")
SENTENCE = ("{topic}: step {n} says what to check before going on, who signs it off, and what to do when the "
            "check fails, so that a reader at three in the morning needs nothing else. ")


def write_folder(root: Path, documents: int = 4) -> Path:
    """Markdown files of one or two chunks each."""
    root.mkdir(parents=True, exist_ok=True)
    for i, topic in enumerate(TOPICS[:documents]):
        paragraphs = ["".join(SENTENCE.format(topic=topic, n=f"{p}.{n}") for n in range(3)) for p in range(2 + i % 2)]
        (root / f"doc{i}.md").write_text(f"# {topic}\n\n" + "\n\n".join(paragraphs) + "\n", encoding="utf-8")
    return root


def endpoint_env(url: str, **overrides: str) -> dict[str, str]:
    return {"HEADWATER_DENSE_ENDPOINT_URL": url, "HEADWATER_DENSE_ENDPOINT_MODEL": MODEL_ALIAS,
            "HEADWATER_DENSE_ENDPOINT_API_KEY_ENV": KEY_ENV, KEY_ENV: KEY, "HEADWATER_DENSE_ENDPOINT_BATCH_SIZE": "1",
            **overrides}


def headwater(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "headwater.cli", *args], capture_output=True, text=True,
                          timeout=400, cwd=cwd, env={**os.environ, "COLUMNS": "200", **env})


def stored(path: Path, collection: str = "headwater") -> tuple[dict, dict]:
    """(id -> (text, vector), the collection's metadata) of an embedded Chroma directory."""
    import chromadb

    found = chromadb.PersistentClient(path=str(path)).get_collection(collection)
    got = found.get(include=["documents", "embeddings"])
    return {i: (d, np.asarray(e, dtype=np.float32)) for i, d, e in zip(got["ids"], got["documents"], got["embeddings"])}, \
        dict(found.metadata or {})


def assert_service_vectors(base_url: str, records: dict) -> None:
    """Every stored vector is what the service answers for the stored text, to float32 rounding."""
    ids = sorted(records)
    expected = np.asarray(service_vectors(base_url, [records[i][0] for i in ids], KEY), dtype=np.float32)
    got = np.vstack([records[i][1] for i in ids])
    # Seen: at most 2e-6 apart on components of about 1 (llama.cpp's last-bit noise); another
    # text's vector, or the same text batched with others, is 1e-3 or more away.
    assert got.shape == expected.shape and np.allclose(got, expected, rtol=1e-5, atol=1e-5), np.abs(got - expected).max()


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    with llama_embedding_server(tmp_path_factory.mktemp("llama"), api_key=KEY) as url:
        yield url


@pytest.fixture(scope="module")
def synced(service, tmp_path_factory):
    """One embedded sync through the endpoint (via a proxy that counts requests)."""
    root = tmp_path_factory.mktemp("synced")
    proxy = FaultyProxy(service)
    folder = write_folder(root / "docs")
    result = headwater("sync", str(folder), "--chroma-path", "store", cwd=root, env=endpoint_env(proxy.url))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    yield {"root": root, "proxy": proxy, "folder": folder, "store": root / "store"}
    proxy.close()


def test_sync_stores_what_the_service_returns_and_records_its_identity(synced, service):
    records, metadata = stored(synced["store"])
    assert len(records) >= 5
    assert_service_vectors(service, records)
    identity = metadata["headwater_dense_model"]
    assert identity.startswith(f"endpoint:{MODEL_ALIAS}/576@"), identity


@pytest.mark.parametrize("mode", ["dense", "sparse", "hybrid"])
def test_every_search_mode_finds_a_chunk_and_queries_embed_through_the_endpoint(synced, mode):
    records, _ = stored(synced["store"])
    wanted, (text, _) = sorted(records.items())[3]
    proxy = synced["proxy"]
    before = proxy.embedding_requests
    found = headwater("query", text, "--chroma-path", "store", "--mode", mode, "-k", "3", "--json", "--per-chunk",
                      cwd=synced["root"], env=endpoint_env(proxy.url))
    assert found.returncode == 0, found.stderr[-3000:]
    ids = [hit["id"] for hit in json.loads(found.stdout)]
    # A chunk's own text finds it first on the dense side; SPLADE-tiny may put a chunk sharing its rare
    # terms above it, so the sparse side is held to the top 3.
    assert (wanted in ids) if mode == "sparse" else ids[0] == wanted, (ids, wanted)
    # The query's dense vector came from the service (sparse mode embeds nothing dense).
    assert proxy.embedding_requests - before == (0 if mode == "sparse" else 1)


def test_another_model_behind_the_same_name_is_refused(synced, tmp_path):
    from headwater.pipeline.stores import open_store
    from headwater.errors import ConfigurationError
    from headwater.settings import Settings
    from headwater.pipeline.dense_source import dense_model_identity

    _, metadata = stored(synced["store"])
    # Same model file, same name, last-token pooling: a swap the name alone does not show.
    with llama_embedding_server(tmp_path, pooling="last", api_key=KEY) as other:
        settings = Settings(chroma_path=synced["store"], collection="headwater", dense_endpoint_url=other,
                            dense_endpoint_model=MODEL_ALIAS, dense_endpoint_api_key_env=KEY_ENV)
        os.environ[KEY_ENV] = KEY
        try:
            swapped = dense_model_identity(settings)
        finally:
            del os.environ[KEY_ENV]
    assert swapped.split("@")[0] == metadata["headwater_dense_model"].split("@")[0]  # name and size agree
    with pytest.raises(ConfigurationError, match="holds vectors from endpoint:smollm2/576@"):
        open_store(settings, dense_model=swapped)
    # And the local model is refused on a collection the endpoint wrote.
    local = headwater("sync", str(synced["folder"]), "--chroma-path", "store", cwd=synced["root"], env={})
    assert local.returncode != 0 and "holds vectors from endpoint:smollm2" in local.stdout + local.stderr
    # A query too: its vector would come from the local model, so it says which service to name.
    query = headwater("query", "token", "--chroma-path", "store", "--mode", "hybrid", cwd=synced["root"], env={})
    assert query.returncode == 1 and "HEADWATER_DENSE_ENDPOINT_MODEL=smollm2" in query.stdout + query.stderr


def test_a_wrong_key_is_a_clear_permanent_error_that_never_shows_the_key(service, tmp_path):
    folder = write_folder(tmp_path / "docs", documents=1)
    wrong = "sk-wrong-key-9876543210"
    result = headwater("sync", str(folder), "--chroma-path", "store", cwd=tmp_path,
                       env=endpoint_env(service, **{KEY_ENV: wrong}))
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "HTTP 401" in output and "HEADWATER_DENSE_ENDPOINT_API_KEY_ENV" in output, output
    assert wrong not in output and KEY not in output
    assert "attempt" not in output  # refused at once: a 401 is not retried


def test_a_text_longer_than_the_service_reads_fails_only_its_document(service, tmp_path):
    from headwater.pipeline.embed_dense import dense_tokenizer_file

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "short.md").write_text("# Note\n\nRotate the token.\n", encoding="utf-8")
    (folder / "long.md").write_text("# Runbook\n\n" + SENTENCE.format(topic="Restore", n=1) * 4, encoding="utf-8")
    proxy = FaultyProxy(service)
    try:
        # A stand-in for the service model's tokenizer.json: any real tokenizer file counts the same way.
        result = headwater("sync", str(folder), "--chroma-path", "store", cwd=tmp_path, env=endpoint_env(
            proxy.url, HEADWATER_DENSE_ENDPOINT_MAX_INPUT_TOKENS="64",
            HEADWATER_DENSE_ENDPOINT_TOKENIZER=str(dense_tokenizer_file())))
    finally:
        proxy.close()
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]  # some failed, the rest indexed
    assert "long.md" in result.stdout and "over the embedding service's limit of 64" in result.stdout
    records, _ = stored(tmp_path / "store")
    assert [text for text, _ in records.values()] and all("Rotate the token" in text for text, _ in records.values())
    assert proxy.embedding_requests == 1 + len(records)  # the probe, then the short document's chunks: nothing long sent


def test_service_down_then_429_slow_and_down_mid_run_loses_nothing(service, tmp_path):
    folder = write_folder(tmp_path / "docs")
    proxy = FaultyProxy(service)
    quick = {"HEADWATER_DENSE_ENDPOINT_RETRIES": "2", "HEADWATER_DENSE_ENDPOINT_BACKOFF_MAX_SECONDS": "0.5"}
    try:
        proxy.stop()  # the service is down when the sync starts: a clear error, nothing written
        down = headwater("sync", str(folder), "--chroma-path", "store", cwd=tmp_path, env=endpoint_env(proxy.url, **quick))
        assert down.returncode != 0 and "check that it is up" in down.stdout + down.stderr, down.stderr[-2000:]
        proxy.start()
        # Mid-run: 429s with Retry-After, a request held past the client's timeout, the service gone for 3 s.
        proxy.faults = {3: ("429", 1), 4: ("429", 1), 6: ("slow", 10), 9: ("down", 3)}
        proxy.embedding_requests = 0
        # The timeout must exceed what a request waits behind the others in flight (the server takes
        # one at a time, about a second a text on a busy machine), or every request times out.
        env = endpoint_env(proxy.url, HEADWATER_DENSE_ENDPOINT_TIMEOUT_SECONDS="8",
                           HEADWATER_DENSE_ENDPOINT_BACKOFF_MAX_SECONDS="1", HEADWATER_DENSE_ENDPOINT_CONCURRENCY="2")
        result = headwater("sync", str(folder), "--chroma-path", "store", cwd=tmp_path, env=env)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    finally:
        proxy.close()
    assert not proxy.faults, f"faults never reached: {proxy.faults}"
    assert proxy.answered.count(429) == 2 and proxy.refused_for == [3]
    records, _ = stored(tmp_path / "store")
    status = headwater("status", "--chroma-path", "store", "--json", cwd=tmp_path, env={})
    assert json.loads(status.stdout)[str(folder.resolve())]["documents"] == 4
    assert len(records) >= 5
    assert_service_vectors(service, records)


def test_fleet_with_a_threaded_embed_pool_writes_the_services_vectors_through_429s(service, tmp_path, monkeypatch):
    from tests.integration.fleet_harness import FleetProcesses
    from tests.services import chroma_server, redis_server
    from headwater import queues as names

    folder = write_folder(tmp_path / "docs")
    proxy = FaultyProxy(service, {3: ("429", 1), 5: ("slow", 10), 7: ("429", 1)})
    env = endpoint_env(proxy.url, HEADWATER_DENSE_ENDPOINT_TIMEOUT_SECONDS="8",
                       HEADWATER_DENSE_ENDPOINT_BACKOFF_MAX_SECONDS="1", HEADWATER_DENSE_ENDPOINT_CONCURRENCY="2")
    for name, value in env.items():
        monkeypatch.setenv(name, value)  # the enqueuing process records the endpoint's identity too
    with redis_server(tmp_path) as redis_url, chroma_server(tmp_path) as (host, port):
        fleet = FleetProcesses(redis_url, host, port, tmp_path)
        fleet.env.update(env)
        try:
            others = ",".join(q for q in names.ALL_QUEUES if q != names.EMBED_DENSE_QUEUE)
            fleet.start_worker("worker", 1, queues=others)
            # The I/O-bound pool: threads, no model loaded; requests in flight bounded per process.
            fleet.start_worker("embed-dense", 4, queues=names.EMBED_DENSE_QUEUE, pool="threads")
            fleet.start_beat()
            client, run_id = fleet.queue_sync("endpoint", folder, "docs")
            run = fleet.wait_for_run(client, run_id, seconds=300)
            assert run.status.value == "complete", fleet.describe(client, run_id)
            from headwater.pipeline.stores import open_store

            store = open_store(fleet.settings("endpoint"), create=False)
            got = store.collection.get(include=["documents", "embeddings"])
            records = {i: (d, np.asarray(e, dtype=np.float32)) for i, d, e in zip(got["ids"], got["documents"], got["embeddings"])}
            assert store.collection.metadata["headwater_dense_model"].startswith(f"endpoint:{MODEL_ALIAS}/576@")
        finally:
            fleet.stop()
            proxy.close()
    assert not proxy.faults and proxy.answered.count(429) == 2
    assert len(records) >= 5
    assert_service_vectors(service, records)
    log = (tmp_path / "embed-dense.log").read_text(errors="replace")
    assert "onnx" not in log.lower() and KEY not in log

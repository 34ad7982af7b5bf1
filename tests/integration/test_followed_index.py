"""A searcher of a Chroma server follows the write log: new chunks are found without a rebuild."""

from __future__ import annotations

import time

import numpy as np
import pytest
import redis

from headwater.store import chroma_store as keys
from headwater.store.chroma_store import ChromaStore
from headwater.pipeline.stores import open_store
from headwater.settings import Settings
from headwater.store.sparse_codec import encode_sparse
from headwater.retrieval.write_log import FollowedIndex, WriteLog
from tests.services import chroma_server, redis_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    root = tmp_path_factory.mktemp("follow")
    with redis_server(root) as url, chroma_server(root) as (host, port):
        yield url, host, port


@pytest.fixture
def setup(servers, tmp_path, request):
    url, host, port = servers
    client = redis.Redis.from_url(url)
    collection = "f-" + request.node.name[-40:].replace("_", "-")
    store = open_store(Settings(chroma_host=host, chroma_port=port, collection=collection))
    store.observers.append(WriteLog(client, collection))
    return store, client, tmp_path / "index"


def write(store: ChromaStore, ids: list[str], term: int) -> None:
    """Records whose sparse vector holds `term` (and a term of their own)."""
    metadatas = [{keys.URI: f"{i}.md", keys.SOURCE_ID: "s",
                  keys.SPARSE: encode_sparse(np.array([term, 1000 + n]), np.array([1.0, 0.5]))}
                 for n, i in enumerate(ids)]
    store.upsert(ids, [f"text {i}" for i in ids], [[0.1, 0.2, 0.3]] * len(ids), metadatas)


def found(index, term: int) -> set[str]:  # noqa: ANN001
    return {i for i, _ in index.search(np.array([term]), np.array([1.0]), 50, lambda rows: [True] * len(rows))}


def test_new_writes_are_found_and_a_restart_does_not_rebuild(setup):
    store, client, directory = setup
    write(store, ["a", "b", "c"], term=7)
    follower = FollowedIndex(store, client, directory, min_interval=0)
    assert follower.rebuilt and found(follower.index, 7) == {"a", "b", "c"}

    write(store, ["d"], term=7)
    store.delete(["a"])
    started = time.monotonic()
    while found(follower.refresh(), 7) != {"b", "c", "d"}:
        assert time.monotonic() - started < 5, "a new chunk was not found within 5 s"
        time.sleep(0.05)

    follower.save()
    write(store, ["e"], term=7)  # written while no searcher runs
    restarted = FollowedIndex(store, client, directory, min_interval=0)
    assert not restarted.rebuilt and found(restarted.index, 7) == {"b", "c", "d", "e"}


def test_a_lost_log_or_an_unlogged_write_leads_to_a_rebuild(setup):
    store, client, directory = setup
    write(store, ["a", "b"], term=9)
    follower = FollowedIndex(store, client, directory, min_interval=0, audit_seconds=0)
    follower.save()
    client.delete(f"headwater:col:{store.collection.name}:writes")  # Redis lost the stream
    write(store, ["c"], term=9)
    assert found(follower.refresh(), 9) == {"a", "b", "c"}

    store.observers.clear()  # another tool writes the collection without logging
    write(store, ["x"], term=9)
    assert found(follower.refresh(), 9) == {"a", "b", "c", "x"}  # the count audit catches it


def test_a_searcher_that_stops_with_unsaved_replays_restarts_without_a_rebuild(setup):
    store, client, directory = setup
    write(store, ["a", "b"], term=11)
    follower = FollowedIndex(store, client, directory, min_interval=0)
    write(store, ["c"], term=11)
    assert found(follower.refresh(), 11) == {"a", "b", "c"}  # applied, not yet saved
    del follower  # the process ends (or is killed) before its next save
    write(store, ["d"], term=11)
    restarted = FollowedIndex(store, client, directory, min_interval=0)
    assert not restarted.rebuilt and found(restarted.index, 11) == {"a", "b", "c", "d"}


def test_replayed_writes_and_restarts_keep_the_dense_vectors_filtered_scans_rank(setup):
    from headwater.retrieval.filtered_dense import collection_space, filtered_dense_search

    store, client, directory = setup
    rng = np.random.default_rng(13)
    vectors = {f"v{n:02d}": rng.standard_normal(8).astype(np.float32) for n in range(60)}

    stored: dict[str, np.ndarray] = {}  # what the collection holds: the exact answer to every query

    def source_of(i: str) -> str:  # every fourth record belongs to the filtered source
        return "t" if int(i[1:]) % 4 == 0 else "s"

    def put(ids: list[str]) -> None:
        metadatas = [{keys.URI: f"{i}.md", keys.SOURCE_ID: source_of(i),
                      keys.SPARSE: encode_sparse(np.array([5]), np.array([1.0]))} for i in ids]
        store.upsert(ids, ids, [vectors[i].tolist() for i in ids], metadatas)
        stored.update((i, vectors[i]) for i in ids)

    def ranks_exactly(index) -> None:  # noqa: ANN001
        # Against exact cosine ranks of what was written, not Chroma's HNSW answer: after deletes and
        # overwrites its graph can miss a neighbour (it left out the 4th of 5 once, under load).
        assert collection_space(store.collection) == "cosine"
        rows = index.location_rows("t", None)
        assert index.dense_blocks(np.flatnonzero(rows)) is not None, "every row's vector is known: the scan plan runs"
        filtered = [i for i in stored if source_of(i) == "t"]
        for query in rng.standard_normal((4, 8)).astype(np.float32):
            ours = filtered_dense_search(store.collection, query.tolist(), 5, {keys.SOURCE_ID: "t"}, index, rows,
                                         lambda source, uri: source == "t", "cosine")
            cosine = {i: stored[i] @ query / np.linalg.norm(stored[i]) / np.linalg.norm(query) for i in filtered}
            assert [i for i, _ in ours] == sorted(filtered, key=lambda i: -cosine[i])[:5]

    put(list(vectors)[:30])
    follower = FollowedIndex(store, client, directory, min_interval=0)
    assert follower.rebuilt
    ranks_exactly(follower.index)
    put(list(vectors)[30:])  # replayed from the log: vectors read back from the server
    store.delete(["v00", "v04"])
    del stored["v00"], stored["v04"]
    vectors["v08"] = rng.standard_normal(8).astype(np.float32)
    put(["v08"])  # overwritten with a new vector
    ranks_exactly(follower.refresh())
    follower.save()
    restarted = FollowedIndex(store, client, directory, min_interval=0)
    assert not restarted.rebuilt
    ranks_exactly(restarted.index)

"""Reading an embedded collection through Chroma's engine gives what Chroma's Python client gives.

This is the contract the CLI's query relies on (headwater.store.engine_reader): a Chroma release whose
engine answers differently fails here, not in a user's search results.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from headwater.store.engine_reader import open_engine_reader
from headwater.errors import ConfigurationError
from headwater.retrieval.searcher import Filters, open_searcher
from headwater.settings import Settings
from tests.integration.conftest import EXAMPLES

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def synced(tmp_path_factory):
    """The sample folder synced once into an embedded Chroma, then read by the client and the engine."""
    import chromadb

    from connectors.folder import FolderConnector
    from headwater.sync.embedded import open_engine

    root = tmp_path_factory.mktemp("engine-reader")
    shutil.copytree(EXAMPLES, root / "docs")
    settings = Settings(chroma_path=root / "store", collection="reader")
    with open_engine(settings) as engine:
        assert engine.sync(FolderConnector("docs", root / "docs")).chunks_embedded > 0
    client = chromadb.PersistentClient(path=str(settings.chroma_path)).get_collection("reader")
    engine_store = open_engine_reader(settings.chroma_path, "reader")
    assert engine_store is not None, "the pinned Chroma's engine did not open: the CLI falls back to the client"
    return settings, client, engine_store.collection


def _same_get(client_result, engine_result, include):
    assert engine_result["ids"] == client_result["ids"] and client_result["ids"]
    for key in include:
        if key == "embeddings":
            assert np.array_equal(engine_result[key], client_result[key])
        else:
            assert engine_result[key] == client_result[key]


@pytest.mark.parametrize("request_", [
    {"limit": 5, "include": ["metadatas", "documents"]},
    {"where": {"source_id": "docs"}, "limit": 4, "offset": 2, "include": ["metadatas"]},
    {"where": {"uri_dirs": {"$contains": "ops"}}, "include": ["documents"]},
    {"where": {"$and": [{"source_id": "docs"}, {"uri": "getting-started.md"}]}, "include": ["metadatas", "embeddings"]},
    {"include": []},
])
def test_get_matches_the_client(synced, request_):
    _, client, engine = synced
    _same_get(client.get(**request_), engine.get(**request_), request_["include"])


def test_get_by_ids_and_count_match_the_client(synced):
    _, client, engine = synced
    ids = client.get(limit=3, include=[])["ids"]
    _same_get(client.get(ids=ids, include=["documents", "metadatas", "embeddings"]),
              engine.get(ids=ids, include=["documents", "metadatas", "embeddings"]), ["documents", "metadatas", "embeddings"])
    assert engine.count() == client.count()
    assert engine.metadata == client.metadata and engine.configuration["hnsw"] == client.configuration["hnsw"]


@pytest.mark.parametrize("restrict", ["none", "where", "ids"])
def test_query_matches_the_client(synced, restrict):
    _, client, engine = synced
    vector = client.get(limit=1, include=["embeddings"])["embeddings"][0].tolist()
    options = {"n_results": 4, "include": ["distances", "metadatas", "documents"]}
    if restrict == "where":
        options["where"] = {"uri_dirs": {"$contains": "ops"}}
    elif restrict == "ids":
        options["ids"] = client.get(where={"uri": "getting-started.md"}, include=[])["ids"]
    expected, found = client.query(query_embeddings=[vector], **options), engine.query(query_embeddings=[vector], **options)
    assert found["ids"] == expected["ids"] and found["ids"][0]
    assert found["metadatas"] == expected["metadatas"] and found["documents"] == expected["documents"]
    assert np.allclose(found["distances"], expected["distances"])


def test_searching_through_the_engine_finds_what_the_client_finds(synced):
    settings, _, _ = synced
    through_engine, through_client = open_searcher(settings, one_off=True), open_searcher(settings)
    assert type(through_engine.store).__name__ == "EngineStore"  # else this test compares the client with itself
    for mode, filters in (("hybrid", Filters()), ("dense", Filters()), ("sparse", Filters()),
                          ("hybrid", Filters(uri_prefix="ops")), ("dense", Filters(where={"mime_type": "text/markdown"}))):
        expected = through_client.search("rotate the chroma token", k=4, mode=mode, filters=filters)
        found = through_engine.search("rotate the chroma token", k=4, mode=mode, filters=filters)
        assert [(h.id, h.text, h.metadata) for h in found] == [(h.id, h.text, h.metadata) for h in expected], mode
        assert found, mode


def test_a_bad_filter_is_the_callers_value_error(synced):
    _, _, engine = synced
    with pytest.raises(ValueError, match="where"):
        engine.get(where={"uri": {"$bogus": 1}}, include=[])


def test_what_is_not_there_is_reported_and_never_created(synced, tmp_path):
    settings, _, _ = synced
    with pytest.raises(ConfigurationError, match="no collection 'absent'.*headwater sync"):
        open_engine_reader(settings.chroma_path, "absent")
    empty = tmp_path / "empty"
    empty.mkdir()
    for path in (tmp_path / "typo", empty):
        with pytest.raises(ConfigurationError, match="no embedded Chroma at"):
            open_engine_reader(path, "reader")
    assert not (tmp_path / "typo").exists() and not any(empty.iterdir())


def test_without_the_engine_module_a_query_opens_the_client_and_finds_the_same(synced, monkeypatch):
    """A Chroma build without the compiled bindings (or one this release does not recognise) still answers."""
    import sys

    settings, _, _ = synced
    expected = open_searcher(settings, one_off=True).search("rotate the chroma token", k=4, mode="hybrid")
    monkeypatch.setitem(sys.modules, "chromadb_rust_bindings", None)  # `import` now raises ImportError
    assert open_engine_reader(settings.chroma_path, "reader") is None
    searcher = open_searcher(settings, one_off=True)
    assert type(searcher.store).__name__ == "ChromaStore"
    found = searcher.search("rotate the chroma token", k=4, mode="hybrid")
    assert [h.id for h in found] == [h.id for h in expected] and found

"""The endpoint embedder's decisions that need no service: identity, input limits, settings."""

from __future__ import annotations

import numpy as np
import pytest

from headwater.store.model_match import same_model
from headwater.settings import Settings
from headwater.pipeline.embed_dense import dense_tokenizer_file
from headwater.pipeline.embed_endpoint import EndpointEmbedder, EndpointInputTooLong, embeddings_url
from headwater.store.model_match import fingerprint, same_fingerprint


def _vectors(dims: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=dims), rng.normal(size=dims)


@pytest.mark.parametrize("dims", [384, 576, 1536])
def test_a_fingerprint_survives_float_noise_and_tells_other_models_apart(dims):
    probe, other = _vectors(dims)
    noisy = probe + np.random.default_rng(1).normal(scale=1e-3 * np.abs(probe).mean(), size=dims)
    assert same_fingerprint(fingerprint(probe), fingerprint(noisy))
    assert same_fingerprint(fingerprint(probe), fingerprint(probe * 7.5))  # scale is not identity
    assert not same_fingerprint(fingerprint(probe), fingerprint(other))
    assert len(fingerprint(probe)) == 32


def test_endpoint_identities_match_on_name_size_and_fingerprint():
    probe, other = _vectors(576)
    mine = f"endpoint:m/576@{fingerprint(probe)}"
    assert same_model(mine, f"endpoint:m/576@{fingerprint(probe * (1 + 1e-4))}")
    assert not same_model(mine, f"endpoint:m/576@{fingerprint(other)}")  # swapped behind the same name
    assert not same_model(mine, f"endpoint:n/576@{fingerprint(probe)}")
    assert not same_model(mine, f"endpoint:m/384@{fingerprint(probe)}")
    assert not same_model(mine, "all-MiniLM-L6-v2+int8@abcdef123456")
    assert not same_model("all-MiniLM-L6-v2+int8@abcdef123456", mine)


def test_embeddings_url_accepts_a_base_or_the_route():
    assert embeddings_url("http://h:8080/v1/") == "http://h:8080/v1/embeddings"
    assert embeddings_url("http://h:8080/v1/embeddings") == "http://h:8080/v1/embeddings"


def test_texts_over_the_services_limit_are_refused_before_sending():
    embedder = EndpointEmbedder("http://127.0.0.1:9/v1", "m", max_input_tokens=64, tokenizer=dense_tokenizer_file())
    try:
        assert embedder.too_long("short text") is None  # fits by its bytes alone: nothing counted
        assert embedder.too_long("word " * 40) is None  # 200 bytes, but 40 tokens: counted, and fits
        reason = embedder.too_long("word " * 100)
        assert reason and "102 tokens" in reason and "HEADWATER_CHUNK_TOKENS" in reason
        with pytest.raises(EndpointInputTooLong, match="over the embedding service's limit"):
            embedder.embed(["fine", "word " * 100])  # port 9 is never contacted: refused first
        assert embedder.requests_sent == 0
    finally:
        embedder.close()


def test_without_a_tokenizer_only_what_certainly_fits_is_known():
    embedder = EndpointEmbedder("http://127.0.0.1:9/v1", "m", max_input_tokens=64)
    try:
        assert embedder.too_long("word " * 100) is None  # cannot be counted here: the service decides
    finally:
        embedder.close()


def test_an_endpoint_needs_a_model_name():
    with pytest.raises(ValueError, match="HEADWATER_DENSE_ENDPOINT_MODEL"):
        Settings(dense_endpoint_url="http://127.0.0.1:8080/v1")
    settings = Settings(dense_endpoint_url="http://127.0.0.1:8080/v1", dense_endpoint_model="bge")
    assert settings.dense_from_endpoint and not Settings().dense_from_endpoint


def test_the_key_is_read_from_the_variable_it_names_and_a_pasted_key_is_never_echoed(monkeypatch):
    from headwater.errors import ConfigurationError
    from headwater.pipeline.dense_source import dense_embedder

    pasted = "sk-live-abcdef0123456789"
    settings = Settings(dense_endpoint_url="http://127.0.0.1:9/v1", dense_endpoint_model="m",
                        dense_endpoint_api_key_env=pasted)
    with pytest.raises(ConfigurationError) as refused:
        dense_embedder(settings)
    assert pasted not in str(refused.value)
    monkeypatch.setenv("EMBED_KEY_FOR_TEST", "sk-real")
    named = settings.model_copy(update={"dense_endpoint_api_key_env": "EMBED_KEY_FOR_TEST"})
    embedder = dense_embedder(named)
    assert embedder._client.headers["authorization"] == "Bearer sk-real"
    assert "sk-real" not in repr(named) and "sk-real" not in named.model_dump_json()


def test_a_query_is_embedded_by_the_source_that_wrote_the_collection():
    from headwater.errors import ConfigurationError
    from headwater.pipeline.dense_source import check_query_source

    local = Settings()
    endpoint = Settings(dense_endpoint_url="http://e/v1", dense_endpoint_model="BAAI/bge-small-en-v1.5")
    written = "endpoint:BAAI/bge-small-en-v1.5/384@" + "00" * 16
    check_query_source(endpoint, written)
    check_query_source(local, "all-MiniLM-L6-v2+int8@abcdef123456")
    check_query_source(local, None)  # a collection that records no model
    with pytest.raises(ConfigurationError, match="HEADWATER_DENSE_ENDPOINT_MODEL=BAAI/bge-small-en-v1.5"):
        check_query_source(local, written)
    with pytest.raises(ConfigurationError, match="unset HEADWATER_DENSE_ENDPOINT_URL"):
        check_query_source(endpoint, "all-MiniLM-L6-v2+int8@abcdef123456")
    with pytest.raises(ConfigurationError, match="same model"):
        check_query_source(endpoint.model_copy(update={"dense_endpoint_model": "other"}), written)

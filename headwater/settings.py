"""All configuration, read once: environment (HEADWATER_*) and an optional headwater.toml."""

from __future__ import annotations

import tomllib
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# Chroma rejects larger writes on every client here, and 5,000 is the design's hard cap.
HARD_BATCH_CAP = 4999
# all-MiniLM-L6-v2 reads at most 256 word pieces ([CLS] and [SEP] included); more is cut off unread.
DENSE_WINDOW_TOKENS = 256


# Ids of sources stored through the API or the dashboard: they are path segments of its URLs.
SOURCE_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


class SourceConfig(BaseModel):
    """A named source declared in headwater.toml ([[sources]]) or added through the HTTP API or the dashboard.

    This is the one source model: `parse` validates it, its kind's options model included, and
    connectors.build_connector builds it, whatever surface it came through. Secrets are options
    that name an environment variable (`token_env`), never values.
    """

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=200)
    kind: str  # a registered source kind (connectors.registered_kinds()): folder, s3, git, web
    options: dict[str, Any] = Field(default_factory=dict)
    collection: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{1,61}[A-Za-z0-9]$")
    # Either, for scheduled reconciliation runs: seconds between runs, or a 5-field cron line (UTC).
    schedule_interval_seconds: float | None = Field(default=None, ge=1, le=366 * 86400)
    schedule_cron: str | None = Field(default=None, max_length=120)

    @field_validator("id")
    @classmethod
    def _id_is_nonempty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("source id must not be empty")
        return value

    @field_validator("kind")
    @classmethod
    def _kind_is_registered(cls, value: str) -> str:
        from connectors import registered_kinds

        if value not in registered_kinds():
            raise ValueError(f"unknown source kind {value!r}; known kinds: {', '.join(registered_kinds())}")
        return value

    @field_validator("schedule_cron")
    @classmethod
    def _cron_parses(cls, value: str | None) -> str | None:
        if value is not None:
            from schedules.source_schedules import parse_cron

            parse_cron(value)
        return value

    @model_validator(mode="after")
    def _one_schedule(self) -> SourceConfig:
        if self.schedule_interval_seconds is not None and self.schedule_cron is not None:
            raise ValueError("give schedule_interval_seconds or schedule_cron, not both")
        return self

    @classmethod
    def parse(cls, data: Any, source_id: str | None = None) -> SourceConfig:
        """The one validation of a source from any surface: its fields, then its kind's options model.

        Raises connectors.InvalidSource naming each bad field (options.bucket, schedule_cron, ...)
        with a message that never echoes what was given. `source_id` (a URL's) wins over the body's.
        """
        import re

        from connectors import InvalidSource, validate_options
        from connectors.base import problems_of

        if not isinstance(data, dict):
            raise InvalidSource([("", "a source is an object with id, kind and options")])
        if source_id is not None:
            if data.get("id", source_id) != source_id:
                raise InvalidSource([("id", "a source's id cannot change; add a new source instead")])
            data = {**data, "id": source_id}
        try:
            config = cls.model_validate(data)
        except ValidationError as error:
            raise InvalidSource(problems_of(error, known=list(cls.model_fields))) from None
        if not re.match(SOURCE_ID, config.id):
            raise InvalidSource([("id", "use letters, digits, '.', '_' and '-' (at most 128), starting with a "
                                        "letter or digit")])
        options = validate_options(config.kind, config.options)
        return config.model_copy(update={"options": options.model_dump(mode="json", exclude_unset=True)})

    def secret_references(self) -> dict[str, str]:
        """Option name -> the environment variable that holds that secret (names only, never values)."""
        return {name: value for name, value in self.options.items() if name.endswith("_env") and value}


class HnswConfig(BaseModel):
    """The dense index of one collection (Chroma's HNSW). Space, m and construction_ef are fixed when
    the collection is created; search_ef can change at any time. bench/hnsw_settings.py measures
    what each costs and buys (README, Performance)."""

    model_config = ConfigDict(extra="forbid")

    space: Literal["cosine", "l2", "ip"] = "cosine"
    m: int = Field(default=16, ge=2, le=128)  # links per node ("max_neighbors" in Chroma)
    construction_ef: int = Field(default=100, ge=2)  # candidates considered while linking a new vector
    search_ef: int = Field(default=200, ge=1)  # candidates considered per query (at least n_results)


class Settings(BaseSettings):
    """Headwater settings. Every field can be set as HEADWATER_<FIELD> in the environment."""

    model_config = SettingsConfigDict(env_prefix="HEADWATER_", extra="ignore")

    config_file: Path = Path("headwater.toml")

    # Target: an embedded Chroma directory, or (fleet) a Chroma server.
    chroma_path: Path = Path(".headwater/chroma")
    chroma_host: str | None = None
    chroma_port: int = 8000
    chroma_token: SecretStr | None = None
    # Chroma Cloud: an API key selects it as the target (tenant and database as in the Cloud console).
    chroma_cloud_api_key: SecretStr | None = None
    chroma_cloud_tenant: str | None = None
    chroma_cloud_database: str | None = None
    collection: str = "headwater"
    # Where a process searching a Chroma server keeps its sparse index (it follows the write log).
    sparse_index_dir: Path = Path(".headwater/sparse-index")

    # Fleet mode: Redis carries queues, run records and in-flight payloads (it keeps no data
    # that cannot be recomputed: Chroma is the record of what is indexed).
    redis_url: SecretStr = SecretStr("redis://127.0.0.1:6379/0")
    # Longer than the slowest task, or Redis redelivers a task that is still running.
    visibility_timeout_seconds: int = Field(default=3600, ge=5)
    # Upserts are flushed when this many records are ready, or this long after the first one.
    flush_delay_seconds: float = Field(default=2.0, gt=0)
    # Embedding batches gather chunk texts from many documents: a batch task starts at once when
    # this many texts wait, else this long after the first (the models see well-filled batches).
    embed_batch_texts: int = Field(default=64, ge=1)
    embed_batch_delay_seconds: float = Field(default=0.25, gt=0)
    # Documents of one run in flight at once: keeps a backfill from starving other sources.
    run_window: int = Field(default=32, ge=1)
    # Retries of a step that failed in a way worth retrying (Chroma or the source unavailable),
    # with exponential backoff up to retry_backoff_max_seconds; then the document is failed.
    task_max_retries: int = Field(default=8, ge=0)
    retry_backoff_max_seconds: float = Field(default=60.0, gt=0)
    # A running step renews its lease every lease_seconds/4; a lease not renewed for lease_seconds
    # means its worker is gone, and the sweeper (every sweep_interval_seconds) runs the step again.
    lease_seconds: float = Field(default=60.0, ge=1)
    sweep_interval_seconds: float = Field(default=30.0, gt=0)
    # A step queued but not started this long is sent again (doubling up to 16x): covers a message
    # lost between a transition and its send. A duplicate finds the step done or held and stops.
    redrive_after_seconds: float = Field(default=120.0, ge=1)
    # A document whose worker is lost (SIGKILL, OOM) this many times at one step is failed as a poison pill.
    max_deliveries: int = Field(default=3, ge=1)
    # Finished runs kept per source (unfinished runs are never trimmed).
    run_history: int = Field(default=100, ge=1)
    # In-flight payloads are deleted as documents move on; this TTL only bounds what a lost run leaves.
    payload_ttl_seconds: int = Field(default=7 * 86400, ge=60)
    # Test-only: named crash points (headwater.fleet.crash) are armed through Redis when this is on.
    test_crash_points: bool = False

    # Chunking, in the dense model's word pieces. A chunk's whole embedded text (context header and
    # special tokens included) fits in chunk_tokens; once it holds chunk_min_tokens it ends at the
    # next paragraph end or content-defined boundary. Changing any of them re-chunks every document
    # at the next sync (the chunker's fingerprint is part of a document's version). The minimum
    # was chosen on bench/retrieval.py's dev sets: of 64, 96, 128 and 160, 96 had the best dense
    # MRR@10 on all three and better sparse than 128 and 160 (README, Hybrid retrieval).
    chunk_tokens: int = Field(default=DENSE_WINDOW_TOKENS, ge=64, le=DENSE_WINDOW_TOKENS)
    chunk_min_tokens: int = Field(default=96, ge=0)
    chunk_overlap_tokens: int = Field(default=0, ge=0)

    # Writes never exceed min(this, the client's max batch size, 4,999).
    upsert_batch_size: int = Field(default=4000, ge=1)

    # The dense index of collections (headwater.toml's [collections.<name>.hnsw] overrides per collection).
    hnsw_space: Literal["cosine", "l2", "ip"] = HnswConfig().space
    hnsw_m: int = HnswConfig().m
    hnsw_construction_ef: int = HnswConfig().construction_ef
    hnsw_search_ef: int = HnswConfig().search_ef

    # Models. Empty paths mean the packaged offline defaults.
    dense_model_dir: Path | None = None
    sparse_model_dir: Path | None = None
    # The int8 build of the dense model (workers/dense_int8.py); false runs the float32 one.
    dense_int8: bool = True
    # Where generated model files live (SPLADE's ONNX export, the int8 dense build); empty: inside
    # the environment, else the user's cache (workers.onnx_session.model_cache_dirs).
    onnx_cache_dir: Path | None = None
    # 0: embedded mode runs each model on one thread, one lane per core; a fleet worker gives each
    # pool process cores / processes.
    model_threads: int = Field(default=0, ge=0)

    # The HTTP app (headwater serve). Every route but /healthz and /readyz needs the admin token
    # (API: `Authorization: Bearer`) or a dashboard session signed with session_secret (derived
    # from the admin token when unset). Sources added through the API are kept in database_url
    # (SQLAlchemy; default: SQLite next to the embedded Chroma directory).
    admin_token: SecretStr | None = None
    session_secret: SecretStr | None = None
    # Browsers send a Secure cookie only over HTTPS (and to localhost); turn off only behind plain-HTTP test rigs.
    session_cookie_secure: bool = True
    session_max_age_seconds: int = Field(default=12 * 3600, ge=60)
    database_url: SecretStr | None = None
    # POST /webhooks/s3/{source_id} (S3-compatible stores that push event notifications over HTTP)
    # needs this as `Authorization: Bearer`; unset, the route answers 404.
    s3_webhook_token: SecretStr | None = None
    # Folder sources added through the API must lie under one of these directories (empty: anywhere
    # the serving process can read). A token holder can otherwise index any readable directory.
    folder_roots: list[Path] = Field(default_factory=list)
    # How often serve samples queue depths and throughput for the dashboard charts and /metrics.
    stats_interval_seconds: float = Field(default=5.0, gt=0)
    # Celery beat (redbeat) looks for new or changed per-source schedules at least this often.
    beat_max_loop_interval_seconds: float = Field(default=5.0, gt=0)

    # Operations (headwater.observability). Error reports go to Sentry when a DSN is set, scrubbed
    # of secrets; logs are JSON lines unless stderr is a terminal (auto), or as set; a worker serves
    # Prometheus metrics on metrics_port when set (its pool processes write samples to metrics_dir).
    sentry_dsn: SecretStr | None = None
    sentry_environment: str = "production"
    sentry_traces_sample_rate: float = Field(default=0.0, ge=0, le=1)
    log_format: Literal["auto", "json", "text"] = "auto"
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    metrics_dir: Path | None = None

    max_document_mb: float = Field(default=25.0, gt=0)
    # Editors save in several steps; wait this long after the last event before syncing a file.
    watch_debounce_seconds: float = Field(default=0.5, ge=0)

    # Git sources: each host keeps its partial clones here (one bare repository per remote).
    git_cache_dir: Path = Path(".headwater/git")
    # POST /webhooks/github: larger bodies are refused (GitHub sends none over 25 MB); a delivery id
    # is remembered this long, so a redelivered or replayed delivery does nothing.
    webhook_max_body_bytes: int = Field(default=25 * 1024 * 1024, ge=1024)
    webhook_delivery_ttl_seconds: float = Field(default=30 * 86400, ge=60)

    @field_validator("chunk_min_tokens", "chunk_overlap_tokens")
    @classmethod
    def _room_left_in_the_window(cls, value: int, info: Any) -> int:
        window = info.data.get("chunk_tokens", DENSE_WINDOW_TOKENS)
        # The minimum may reach past what a header leaves (the chunker then stops at the budget);
        # an overlap takes room from every chunk, so it is kept to a quarter of the window.
        limit = window - 1 if info.field_name == "chunk_min_tokens" else window // 4
        if value > limit:
            raise ValueError(f"{info.field_name} ({value}) must be at most {limit} for chunk_tokens {window}")
        return value

    @cached_property
    def _config_file_data(self) -> dict[str, Any]:
        if not self.config_file.is_file():
            return {}
        try:
            return tomllib.loads(self.config_file.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"{self.config_file}: not valid TOML ({exc}); fix the file or remove it") from exc

    def hnsw(self, collection: str | None = None) -> HnswConfig:
        """The dense index settings of a collection: HEADWATER_HNSW_*, then its [collections.<name>.hnsw] table."""
        name = collection or self.collection
        table = self._config_file_data.get("collections", {}).get(name, {}).get("hnsw", {})
        try:
            return HnswConfig(**{"space": self.hnsw_space, "m": self.hnsw_m, "construction_ef": self.hnsw_construction_ef,
                                 "search_ef": self.hnsw_search_ef, **table})
        except ValueError as exc:
            raise ValueError(f"{self.config_file}: [collections.{name}.hnsw]: {exc}") from exc

    @cached_property
    def sources(self) -> list[SourceConfig]:
        """Sources declared in the config file (none when the file does not exist)."""
        from connectors import InvalidSource
        from connectors.base import problems_of

        sources = []
        for number, entry in enumerate(self._config_file_data.get("sources", []), 1):
            try:
                sources.append(SourceConfig.model_validate(entry))
            except ValidationError as error:
                name = entry.get("id", f"#{number}") if isinstance(entry, dict) else f"#{number}"
                raise InvalidSource([(f"{self.config_file}: [[sources]] {name}: {field}", message) for field, message
                                     in problems_of(error, known=list(SourceConfig.model_fields))]) from None
        seen: set[str] = set()
        for source in sources:
            if source.id in seen:
                raise ValueError(f"{self.config_file}: source id {source.id!r} is declared twice")
            seen.add(source.id)
        return sources

    def source(self, source_id: str) -> SourceConfig | None:
        """The declared source with this id, if any."""
        return next((s for s in self.sources if s.id == source_id), None)

    @property
    def is_cloud(self) -> bool:
        return self.chroma_cloud_api_key is not None

    @property
    def is_remote(self) -> bool:
        """A Chroma server or Chroma Cloud, not an embedded directory this process opens itself."""
        return bool(self.chroma_host or self.is_cloud)

    @property
    def max_document_bytes(self) -> int:
        return int(self.max_document_mb * 1024 * 1024)


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment, with explicit (CLI) overrides winning; None means unset."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})

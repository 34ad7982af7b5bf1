"""All configuration, read once: environment (HEADWATER_*) and an optional headwater.toml."""

from __future__ import annotations

import tomllib
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# Chroma rejects larger writes on every client here, and 5,000 is the design's hard cap.
HARD_BATCH_CAP = 4999
# all-MiniLM-L6-v2 reads at most 256 word pieces ([CLS] and [SEP] included); more is cut off unread.
DENSE_WINDOW_TOKENS = 256


class HnswConfig(BaseModel):
    """The dense index of one collection (Chroma's HNSW). Space, m and construction_ef are fixed when
    the collection is created; search_ef can change at any time. bench/hnsw_settings.py measures
    what each costs and buys (docs/benchmarks.md)."""

    # Each field's docstring is its description in the configuration reference (scripts/gen_config_docs.py).
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    space: Literal["cosine", "l2", "ip"] = "cosine"
    """Distance: `cosine`, `l2` or `ip`; fixed when the collection is created."""
    m: int = Field(default=16, ge=2, le=128)
    """Links per node (Chroma's `max_neighbors`); fixed when the collection is created."""
    construction_ef: int = Field(default=100, ge=2)
    """Candidates considered while linking a new vector; fixed when the collection is created."""
    search_ef: int = Field(default=200, ge=1)
    """Candidates considered per query (at least the results asked for); can change at any time."""


class Settings(BaseSettings):
    """Headwater settings. Every field can be set as HEADWATER_<FIELD> in the environment."""

    # Each field's docstring is its description in the configuration reference (scripts/gen_config_docs.py).
    model_config = SettingsConfigDict(env_prefix="HEADWATER_", extra="ignore", use_attribute_docstrings=True)

    config_file: Path = Path("headwater.toml")
    """The TOML file that declares sources (`[[sources]]`) and per-collection index settings."""

    # Target: an embedded Chroma directory, or (fleet) a Chroma server.
    chroma_path: Path = Path(".headwater/chroma")
    """The embedded Chroma directory (used when no Chroma server or Cloud is configured)."""
    chroma_host: str | None = None
    """A Chroma server's host name; set, Headwater writes to that server instead of the embedded directory."""
    chroma_port: int = 8000
    """The Chroma server's port."""
    chroma_token: SecretStr | None = None
    """Sent to the Chroma server as `Authorization: Bearer`, for a proxy that checks it (the open-source server checks none)."""
    # Chroma Cloud: an API key selects it as the target (tenant and database as in the Cloud console).
    chroma_cloud_api_key: SecretStr | None = None
    """A Chroma Cloud API key; set, Chroma Cloud is the target."""
    chroma_cloud_tenant: str | None = None
    """The Chroma Cloud tenant (as in the Cloud console)."""
    chroma_cloud_database: str | None = None
    """The Chroma Cloud database (as in the Cloud console)."""
    collection: str = "headwater"
    """The collection documents are written to and searched in."""
    # Where a process searching a Chroma server keeps its sparse index (it follows the write log).
    sparse_index_dir: Path = Path(".headwater/sparse-index")
    """Where a process searching a Chroma server keeps its sparse index, which follows the write log."""

    # Fleet mode: Redis carries queues, run records and in-flight payloads (it keeps no data
    # that cannot be recomputed: Chroma is the record of what is indexed).
    redis_url: SecretStr = SecretStr("redis://127.0.0.1:6379/0")
    """Fleet: the Redis that holds queues, runs and in-flight payloads (default: Redis on 127.0.0.1:6379, database 0)."""
    # Longer than the slowest task, or Redis redelivers a task that is still running.
    visibility_timeout_seconds: int = Field(default=3600, ge=5)
    """Fleet: when Redis hands back an unacknowledged message; keep it above the slowest task."""
    # Upserts are flushed when this many records are ready, or this long after the first one.
    flush_delay_seconds: float = Field(default=2.0, gt=0)
    """Fleet: longest wait before ready documents are written (documents of live changes are written at once)."""
    # Embedding batches gather chunk texts from many documents: a batch task starts at once when
    # this many texts wait, else this long after the first (the models see well-filled batches).
    embed_batch_texts: int = Field(default=64, ge=1)
    """Fleet: an embedding batch starts as soon as this many chunk texts wait."""
    embed_batch_delay_seconds: float = Field(default=0.25, gt=0)
    """Fleet: an embedding batch starts this long after its first text arrived, if it did not fill first."""
    # Documents of one run in flight at once: keeps a backfill from starving other sources.
    run_window: int = Field(default=32, ge=1)
    """Fleet: documents of one run in flight at once, so a backfill does not starve other sources."""
    # Retries of a step that failed in a way worth retrying (Chroma or the source unavailable),
    # with exponential backoff up to retry_backoff_max_seconds; then the document is failed.
    task_max_retries: int = Field(default=8, ge=0)
    """Fleet: retries of a step that failed transiently (Chroma or the source unavailable) before the document fails."""
    retry_backoff_max_seconds: float = Field(default=60.0, gt=0)
    """Fleet: the longest wait between two retries (exponential backoff with jitter)."""
    # A running step renews its lease every lease_seconds/4; a lease not renewed for lease_seconds
    # means its worker is gone, and the sweeper (every sweep_interval_seconds) runs the step again.
    # A whole worker lost is so re-driven within lease + sweep interval (20 s). The Redis cost is
    # one ZADD per running step every lease/4 and one ZRANGEBYSCORE per sweep: a few commands a
    # second for a fleet of dozens of workers. A step stalled longer than the lease (a pause that
    # holds the GIL for 15 s) runs twice; its second run finds the first one's commit and stops.
    lease_seconds: float = Field(default=15.0, ge=1)
    """Fleet: a step whose lease is not renewed for this long is taken to have lost its worker and is run again."""
    sweep_interval_seconds: float = Field(default=5.0, gt=0)
    """Fleet: how often the sweeper (`headwater beat`) re-drives expired leases."""
    # A step queued but not started this long is sent again (doubling up to 16x): covers a message
    # lost between a transition and its send. A duplicate finds the step done or held and stops.
    redrive_after_seconds: float = Field(default=120.0, ge=1)
    """Fleet: a step queued but not started for this long is sent again (with doubling gaps)."""
    # A document whose worker is lost (SIGKILL, OOM) this many times at one step is failed as a poison pill.
    max_deliveries: int = Field(default=3, ge=1)
    """Fleet: a document whose worker is lost this many times at one step fails as a poison pill."""
    # Finished runs kept per source (unfinished runs are never trimmed).
    run_history: int = Field(default=100, ge=1)
    """Fleet: finished runs kept per source (unfinished runs are never trimmed)."""
    # In-flight payloads are deleted as documents move on; this TTL only bounds what a lost run leaves.
    payload_ttl_seconds: int = Field(default=7 * 86400, ge=60)
    """Fleet: the longest an in-flight payload (bytes, plans, vectors) of a lost run stays in Redis."""
    # Test-only: named crash points (headwater.fleet.crash) are armed through Redis when this is on.
    test_crash_points: bool = False
    """Tests only: lets a test arm named crash points (through Redis) at which a worker kills itself."""

    # Chunking, in the dense model's word pieces. A chunk's whole embedded text (context header and
    # special tokens included) fits in chunk_tokens; once it holds chunk_min_tokens it ends at the
    # next paragraph end or content-defined boundary. Changing any of them re-chunks every document
    # at the next sync (the chunker's fingerprint is part of a document's version). The minimum
    # was chosen on bench/retrieval.py's dev sets: of 64, 96, 128 and 160, 96 had the best dense
    # MRR@10 on all three and better sparse than 128 and 160 (docs/benchmarks.md).
    chunk_tokens: int = Field(default=DENSE_WINDOW_TOKENS, ge=64, le=DENSE_WINDOW_TOKENS)
    """Most word pieces in a chunk's embedded text, header and special tokens included (64 to 256: MiniLM's window)."""
    chunk_min_tokens: int = Field(default=96, ge=0)
    """Past this many word pieces a chunk ends at the next paragraph end, blank line or content-defined boundary."""
    chunk_overlap_tokens: int = Field(default=0, ge=0)
    """Prose and plain text: word pieces of the previous chunk repeated at the start of the next (at most a quarter of the window)."""

    # Writes never exceed min(this, the client's max batch size, 4,999).
    upsert_batch_size: int = Field(default=4000, ge=1)
    """Records per write; never more than the client's maximum batch size or 4,999 (300 on Chroma Cloud)."""

    # The dense index of collections (headwater.toml's [collections.<name>.hnsw] overrides per collection).
    hnsw_space: Literal["cosine", "l2", "ip"] = HnswConfig().space
    """Distance of a new collection's dense index; fixed once the collection exists."""
    hnsw_m: int = HnswConfig().m
    """Links per node in a new collection's dense index (HNSW M); fixed once the collection exists."""
    hnsw_construction_ef: int = HnswConfig().construction_ef
    """Candidates considered while linking a vector into a new collection's dense index; fixed once it exists."""
    hnsw_search_ef: int = HnswConfig().search_ef
    """Candidates considered per dense query (at least the results asked for); can change at any time."""

    # Models. Empty paths mean the packaged offline defaults.
    dense_model_dir: Path | None = None
    """A directory holding another dense model in Chroma's layout (`onnx/model.onnx` and tokenizer files); unset: the packaged all-MiniLM-L6-v2."""
    sparse_model_dir: Path | None = None
    """Any SPLADE checkpoint on disk (a saved masked-LM model and its tokenizer); unset: the packaged SPLADE-tiny."""
    # The int8 build of the dense model (headwater/pipeline/dense_int8.py); false runs the float32 one.
    dense_int8: bool = True
    """Run the int8 build of the dense model; `false` runs it in float32, as Chroma's default function does. A collection records which one wrote it."""
    # Where generated model files live (SPLADE's ONNX export, the int8 dense build); empty: inside
    # the environment, else the user's cache (headwater.pipeline.onnx_session.model_cache_dirs).
    onnx_cache_dir: Path | None = None
    """Where generated model files are kept (SPLADE's ONNX export, the int8 dense build); unset: inside the environment, else `~/.cache/headwater/onnx`."""
    # 0: embedded mode runs each model on one thread, one lane per core; a fleet worker gives each
    # pool process cores / processes.
    model_threads: int = Field(default=0, ge=0)
    """CPU threads per model runtime; 0 chooses: one per model in embedded mode (one lane per core), cores / pool processes in a fleet worker."""

    # Dense vectors from an OpenAI-compatible /v1/embeddings endpoint instead of the local model
    # (headwater/pipeline/embed_endpoint.py, docs/embedding-service.md): set the URL (e.g. http://host:8080/v1)
    # and the model name the service knows. The API key is read from the environment variable
    # api_key_env names, when used, and never stored, logged or echoed. Requests carry batch_size
    # texts; one process keeps at most concurrency requests in flight. Timeouts, 429 and 5xx are
    # retried `retries` times with exponential backoff up to backoff_max_seconds, or as long as the
    # service's Retry-After says. Texts the service cannot read whole (max_input_tokens, counted
    # exactly with the service model's tokenizer.json when given) are refused before sending.
    dense_endpoint_url: str | None = None
    """An OpenAI-compatible embeddings service (`http://host:port/v1`) for dense vectors instead of the local model; unset: the local model."""
    dense_endpoint_model: str | None = None
    """The model name the embeddings service knows (required with the URL); recorded in the collection with the vector size and a probe's fingerprint."""
    dense_endpoint_dimensions: int | None = Field(default=None, ge=1)
    """Ask the service for vectors of this size (models that can shorten them); unset: the model's own size."""
    dense_endpoint_api_key_env: str | None = None
    """The name of the environment variable holding the service's API key (sent as a bearer token; never stored or logged)."""
    dense_endpoint_batch_size: int = Field(default=32, ge=1)
    """Texts per request to the embeddings service."""
    dense_endpoint_concurrency: int = Field(default=4, ge=1)
    """Requests in flight at once from one process (shared by its threads)."""
    dense_endpoint_timeout_seconds: float = Field(default=60.0, gt=0)
    """How long one request may take before it is retried."""
    dense_endpoint_connect_timeout_seconds: float = Field(default=5.0, gt=0)
    """How long connecting to the service may take before it is retried."""
    dense_endpoint_retries: int = Field(default=8, ge=0)
    """Retries of a request that timed out or got 408, 409, 425, 429 or 5xx (its Retry-After is honoured); other 4xx fail at once."""
    dense_endpoint_backoff_max_seconds: float = Field(default=30.0, gt=0)
    """The longest wait between two retries (exponential backoff with jitter)."""
    dense_endpoint_max_input_tokens: int | None = Field(default=None, ge=16)
    """The service's input limit in tokens: longer texts are refused before sending (their document fails with the reason)."""
    dense_endpoint_tokenizer: Path | None = None
    """The service model's tokenizer.json, to count tokens exactly for the input limit; unset: texts that fit by bytes are sent as they are."""

    @model_validator(mode="after")
    def _endpoint_names_a_model(self) -> Settings:
        if self.dense_endpoint_url and not (self.dense_endpoint_model or "").strip():
            raise ValueError("HEADWATER_DENSE_ENDPOINT_URL needs HEADWATER_DENSE_ENDPOINT_MODEL (the model name the service knows)")
        return self

    # The HTTP app (headwater serve). Every route but /healthz and /readyz needs the admin token
    # (API: `Authorization: Bearer`) or a dashboard session signed with session_secret (derived
    # from the admin token when unset). Sources added through the API are kept in database_url
    # (SQLAlchemy; default: SQLite next to the embedded Chroma directory).
    admin_token: SecretStr | None = None
    """`headwater serve`: the API's bearer token and the dashboard's login, at least 16 characters; serve refuses to start without it."""
    session_secret: SecretStr | None = None
    """`headwater serve`: signs dashboard sessions; unset: derived from the admin token."""
    # Browsers send a Secure cookie only over HTTPS (and to localhost); turn off only behind plain-HTTP test rigs.
    session_cookie_secure: bool = True
    """`headwater serve`: mark the session cookie `Secure` (browsers then send it only over HTTPS or to localhost)."""
    session_max_age_seconds: int = Field(default=12 * 3600, ge=60)
    """`headwater serve`: how long a dashboard login lasts."""
    database_url: SecretStr | None = None
    """`headwater serve`: SQLAlchemy URL of the database that keeps API sources, git cursors and embedded runs; unset: SQLite beside the embedded Chroma."""
    # POST /webhooks/s3/{source_id} (S3-compatible stores that push event notifications over HTTP)
    # needs this as `Authorization: Bearer`; unset, the route answers 404.
    s3_webhook_token: SecretStr | None = None
    """`headwater serve`: bearer token of `POST /webhooks/s3/{source_id}`; unset, that route answers 404."""
    # Folder sources added through the API must lie under one of these directories: a token holder
    # could otherwise index any readable directory. Unset: headwater.http.folder_roots's default.
    folder_roots: list[Path] | None = None
    """`headwater serve`: folder sources added through the API or the dashboard must lie under one of these directories (a JSON list; `[]`: none). Unset: the directory serve was started in, or none when that is `/`, a home directory itself, a directory holding unrelated ones (`/home`, `/tmp`, `/var`, `/srv`, `/opt`...) or a system directory (`/etc`, `/usr`, `/proc`...)."""
    # How often serve samples queue depths and throughput for the dashboard charts and /metrics.
    stats_interval_seconds: float = Field(default=5.0, gt=0)
    """`headwater serve`: how often queue depths and throughput are sampled for the dashboard charts and `/metrics`."""
    # Celery beat (redbeat) looks for new or changed per-source schedules at least this often.
    beat_max_loop_interval_seconds: float = Field(default=5.0, gt=0)
    """`headwater beat`: the longest wait before it sees a new or changed per-source schedule."""

    # Operations (headwater.observability). Error reports go to Sentry when a DSN is set, scrubbed
    # of secrets; logs are JSON lines unless stderr is a terminal (auto), or as set; a worker serves
    # Prometheus metrics on metrics_port when set (its pool processes write samples to metrics_dir).
    sentry_dsn: SecretStr | None = None
    """Sentry DSN for error reports from serve, workers and beat (scrubbed of secrets); unset: no error reports."""
    sentry_environment: str = "production"
    """The environment tag on Sentry reports."""
    sentry_traces_sample_rate: float = Field(default=0.0, ge=0, le=1)
    """Share of requests and tasks traced to Sentry (0 to 1)."""
    log_format: Literal["auto", "json", "text"] = "auto"
    """`auto`: JSON lines unless stderr is a terminal; `json`; `text`."""
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    """A worker serves Prometheus metrics, summed over its pool processes, on this port; unset: none."""
    metrics_dir: Path | None = None
    """Where a worker's pool processes write their metric samples; unset: a fresh temporary directory."""

    max_document_mb: float = Field(default=25.0, gt=0)
    """Larger documents are reported as skipped, not read."""
    # Editors save in several steps; wait this long after the last event before syncing a file.
    watch_debounce_seconds: float = Field(default=0.5, ge=0)
    """`headwater watch`: quiet time after a file's last event before it is synced."""

    # Git sources: each host keeps its partial clones here (one bare repository per remote).
    git_cache_dir: Path = Path(".headwater/git")
    """Git sources keep their partial clones here (one bare repository per remote)."""
    # POST /webhooks/github: larger bodies are refused (GitHub sends none over 25 MB); a delivery id
    # is remembered this long, so a redelivered or replayed delivery does nothing.
    webhook_max_body_bytes: int = Field(default=25 * 1024 * 1024, ge=1024)
    """`POST /webhooks/github` refuses larger bodies with 413 (GitHub sends none over 25 MB)."""
    webhook_delivery_ttl_seconds: float = Field(default=30 * 86400, ge=60)
    """How long a GitHub delivery id is remembered, so a redelivery or replay does nothing."""

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

    @property
    def declared_source_entries(self) -> list[Any]:
        """The config file's [[sources]] tables as written (headwater.sources.model validates them)."""
        return list(self._config_file_data.get("sources", []))

    @property
    def dense_from_endpoint(self) -> bool:
        """Whether dense vectors come from an embeddings endpoint rather than the local model."""
        return bool(self.dense_endpoint_url)

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

"""Sources as the HTTP app sees them: declared in headwater.toml (read-only) or added through the API (stored)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from headwater.settings import Settings, SourceConfig
from headwater.store.source_store import SourceStore

SOURCE_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,127}$")


class FolderOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, max_length=4096, description="An absolute directory path readable by whoever syncs it.")
    include: list[str] = Field(default_factory=lambda: ["**"], max_length=100)
    exclude: list[str] | None = Field(default=None, max_length=100, description="Default: hidden files, node_modules, __pycache__, backups.")


class S3Options(BaseModel):
    """An S3 bucket (or a prefix of one). Credentials come from the server's AWS environment, never from here."""

    model_config = ConfigDict(extra="forbid")

    bucket: str = Field(min_length=3, max_length=63, pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
    prefix: str = Field(default="", max_length=1024)
    include: list[str] = Field(default_factory=lambda: ["**"], max_length=100)
    exclude: list[str] = Field(default_factory=list, max_length=100)
    region: str | None = Field(default=None, max_length=40, pattern=r"^[a-z0-9-]+$")
    endpoint_url: str | None = Field(default=None, max_length=400, pattern=r"^https?://[^\s@]+$",
                                     description="An S3-compatible endpoint; default AWS (or AWS_ENDPOINT_URL).")
    max_object_mb: float | None = Field(default=None, gt=0)
    queue_url: str | None = Field(default=None, max_length=400, pattern=r"^https?://[^\s@]+$",
                                  description="The SQS queue of the bucket's event notifications (for `headwater watch`).")


class SourceFields(BaseModel):
    """A source's configuration (everything but its id)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["folder", "s3"]
    options: FolderOptions | S3Options
    collection: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{1,61}[A-Za-z0-9]$")
    schedule_interval_seconds: float | None = Field(default=None, ge=1, le=366 * 86400)
    schedule_cron: str | None = Field(default=None, max_length=120, description="5 fields, UTC: minute hour day month weekday.")
    secrets: dict[str, str] | None = Field(
        default=None, description="Write-only: option name -> the NAME of an environment variable holding the secret. "
                                  "Never a secret value; never returned.")

    @field_validator("secrets")
    @classmethod
    def _secret_references(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for option, env_name in (value or {}).items():
            if not ENV_NAME.match(env_name):
                # Never echo the value: it may be the secret itself, pasted where its variable's name belongs.
                raise ValueError(f"secrets.{option[:40]} must name an environment variable (A-Z, 0-9, _), not hold a value")
        return value

    @model_validator(mode="after")
    def _one_schedule(self) -> SourceFields:
        if self.schedule_interval_seconds is not None and self.schedule_cron is not None:
            raise ValueError("give schedule_interval_seconds or schedule_cron, not both")
        if self.schedule_cron is not None:
            from schedules.source_schedules import parse_cron

            parse_cron(self.schedule_cron)
        if self.kind == "folder" and self.secrets:
            raise ValueError("folder sources take no secrets")
        if self.kind == "s3":
            if not isinstance(self.options, S3Options):
                raise ValueError("an s3 source's options name a bucket (and optionally prefix, include, exclude, "
                                 "region, endpoint_url, max_object_mb, queue_url)")
            if self.secrets:
                raise ValueError("s3 sources take no secrets: credentials come from the server's AWS environment")
            return self
        options = self.options
        if not isinstance(options, FolderOptions):
            raise ValueError("a folder source's options name a path")
        if not Path(options.path).is_absolute():
            raise ValueError("options.path must be an absolute path")
        if not Path(options.path).is_dir():
            raise ValueError("options.path is not a directory on this server")
        return self

    def check_roots(self, roots: list[Path]) -> None:
        """ValueError unless the folder lies under one of the allowed roots (when any are configured)."""
        if not roots or not isinstance(self.options, FolderOptions):
            return
        path = Path(self.options.path).resolve()
        if not any(path == Path(r).resolve() or Path(r).resolve() in path.parents for r in roots):
            raise ValueError("options.path is outside the directories this server may index (HEADWATER_FOLDER_ROOTS)")


class SourceIn(SourceFields):
    id: str = Field(pattern=SOURCE_ID, description="Stable id: letters, digits, '.', '_', '-'.")


@dataclass
class Source:
    config: SourceConfig
    origin: Literal["config", "api"]
    secret_options: list[str] = field(default_factory=list)
    created_at: float | None = None
    updated_at: float | None = None

    @property
    def id(self) -> str:
        return self.config.id

    @property
    def read_only(self) -> bool:
        return self.origin == "config"

    def to_json(self) -> dict[str, Any]:
        c = self.config
        return {"id": c.id, "kind": c.kind, "options": c.options, "collection": c.collection,
                "schedule_interval_seconds": c.schedule_interval_seconds, "schedule_cron": c.schedule_cron,
                "secret_options": self.secret_options, "origin": self.origin, "read_only": self.read_only,
                "created_at": self.created_at, "updated_at": self.updated_at}


def config_from(fields: SourceFields, source_id: str) -> SourceConfig:
    options = fields.options.model_dump(exclude_none=True)
    if fields.kind == "folder":
        options["path"] = str(Path(options["path"]).resolve())
    return SourceConfig(id=source_id, kind=fields.kind, options=options, collection=fields.collection,
                        schedule_interval_seconds=fields.schedule_interval_seconds, schedule_cron=fields.schedule_cron)


class SourceCatalog:
    """headwater.toml sources (read-only) and stored ones, under one set of ids."""

    def __init__(self, settings: Settings, store: SourceStore) -> None:
        self.settings = settings
        self.store = store

    def all(self) -> list[Source]:
        declared = [Source(s, "config") for s in self.settings.sources]
        stored = [Source(r.config(), "api", sorted(r.secret_refs or {}), r.created_at, r.updated_at)
                  for r in self.store.list_sources()]
        return declared + stored

    def get(self, source_id: str) -> Source | None:
        declared = self.settings.source(source_id)
        if declared is not None:
            return Source(declared, "config")
        row = self.store.get_source(source_id)
        return None if row is None else Source(row.config(), "api", sorted(row.secret_refs or {}), row.created_at, row.updated_at)

    def collection_of(self, source_id: str | None) -> str:
        """The collection a source writes (the configured one for sources that name none, or for no source)."""
        source = self.get(source_id) if source_id else None
        return (source.config.collection if source else None) or self.settings.collection

    def collections(self) -> list[str]:
        """Every collection the sources write, the configured default among them."""
        return sorted({self.settings.collection} | {s.config.collection for s in self.all() if s.config.collection})


def build_source_connector(settings: Settings, config: SourceConfig) -> Any:
    """The connector of a source, never indexing the embedded Chroma directory itself."""
    from connectors import build_connector
    from connectors.folder import DEFAULT_EXCLUDE

    options = dict(config.options)
    if config.kind == "folder":
        options.setdefault("exclude", list(DEFAULT_EXCLUDE))
        root = Path(options["path"]).resolve()
        chroma = Path(settings.chroma_path).resolve()
        if chroma == root or root in chroma.parents:
            options["exclude"] = [*options["exclude"], chroma.relative_to(root).as_posix() + "/**"]
    connector = build_connector(config.kind, config.id, **options)
    keep_state_in = getattr(connector, "keep_state_in", None)
    if keep_state_in is not None:  # a web source's validators and links, next to the embedded Chroma
        keep_state_in(Path(settings.chroma_path).parent / "crawl")
    return connector

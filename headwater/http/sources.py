"""Sources as the HTTP app sees them: declared in headwater.toml (read-only) or added through the API or
the dashboard (stored). Both surfaces validate through the one source model (SourceConfig.parse) and
build through headwater.sources; this module adds only what a server decides: where folders may be."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from connectors import InvalidSource
from headwater.settings import Settings
from headwater.sources.model import SourceConfig, declared_source, declared_sources
from headwater.sources.build import build_source_connector
from headwater.store.source_store import SourceStore

__all__ = ["Source", "SourceCatalog", "build_source_connector", "parse_stored_source"]


def parse_stored_source(data: Any, settings: Settings, source_id: str | None = None) -> SourceConfig:
    """A source to store, from a request body or a form: the one validation, then where this server lets
    folders be (headwater.http.folder_roots). InvalidSource names the field."""
    config = SourceConfig.parse(data, source_id)
    if config.kind == "folder":
        from headwater.http.folder_roots import refusal

        why = refusal(config.options["path"], settings)
        if why is not None:
            raise InvalidSource([("options.path", why)])
    return config


@dataclass
class Source:
    config: SourceConfig
    origin: Literal["config", "api"]
    created_at: float | None = None
    updated_at: float | None = None

    @property
    def id(self) -> str:
        return self.config.id

    @property
    def read_only(self) -> bool:
        return self.origin == "config"

    @property
    def location(self) -> str:
        """Where the source is, in one line (a folder's path, s3://bucket/prefix, a repository's URL and branch)."""
        o = self.config.options
        match self.config.kind:
            case "folder":
                return str(o.get("path", ""))
            case "s3":
                return f"s3://{o.get('bucket', '')}/{o.get('prefix', '')}"
            case "git":
                return f"{o.get('url', '')} ({o.get('branch', 'main')})"
            case "web":
                return ", ".join(o.get("start_urls") or [])
        return ""

    def to_json(self) -> dict[str, Any]:
        c = self.config
        return {"id": c.id, "kind": c.kind, "options": c.options, "collection": c.collection,
                "schedule_interval_seconds": c.schedule_interval_seconds, "schedule_cron": c.schedule_cron,
                "secret_options": sorted(c.secret_references()), "origin": self.origin, "read_only": self.read_only,
                "created_at": self.created_at, "updated_at": self.updated_at}


class SourceCatalog:
    """headwater.toml sources (read-only) and stored ones, under one set of ids."""

    def __init__(self, settings: Settings, store: SourceStore) -> None:
        self.settings = settings
        self.store = store

    def all(self) -> list[Source]:
        declared = [Source(s, "config") for s in declared_sources(self.settings)]
        stored = [Source(r.config(), "api", r.created_at, r.updated_at) for r in self.store.list_sources()]
        return declared + stored

    def get(self, source_id: str) -> Source | None:
        declared = declared_source(self.settings, source_id)
        if declared is not None:
            return Source(declared, "config")
        row = self.store.get_source(source_id)
        return None if row is None else Source(row.config(), "api", row.created_at, row.updated_at)

    def collection_of(self, source_id: str | None) -> str:
        """The collection a source writes (the configured one for sources that name none, or for no source)."""
        source = self.get(source_id) if source_id else None
        return (source.config.collection if source else None) or self.settings.collection

    def collections(self) -> list[str]:
        """Every collection the sources write, the configured default among them."""
        return sorted({self.settings.collection} | {s.config.collection for s in self.all() if s.config.collection})

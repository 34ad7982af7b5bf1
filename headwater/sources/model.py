"""The one source model: what a source is (its kind, options, collection and schedule), validated once for every surface.

headwater.toml's [[sources]], the REST API, the dashboard's forms and the CLI all build a
SourceConfig through `SourceConfig.parse`, which checks the source's own fields and then its
kind's options model (connectors); headwater.sources.build makes connectors from it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from headwater.cron import check_cron
from headwater.settings import Settings

# Ids of sources stored through the API or the dashboard: they are path segments of its URLs.
SOURCE_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"



class SourceConfig(BaseModel):
    """A named source declared in headwater.toml ([[sources]]) or added through the HTTP API or the dashboard.

    This is the one source model: `parse` validates it, its kind's options model included, and
    connectors.build_connector builds it, whatever surface it came through. Secrets are options
    that name an environment variable (`token_env`), never values.
    """

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    id: str = Field(min_length=1, max_length=200)
    """The source's id: what commands and the API name it by, and what every chunk of it carries as `source_id`."""
    kind: str  # a registered source kind (connectors.registered_kinds()): folder, s3, git, web
    """The source kind: `folder`, `s3`, `git` or `web`."""
    options: dict[str, Any] = Field(default_factory=dict)
    """The kind's options (a folder's `path`, a bucket's `bucket` and `prefix`, ...): see the guide of each source kind."""
    collection: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{1,61}[A-Za-z0-9]$")
    """The collection the source is written to; unset: `HEADWATER_COLLECTION`."""
    # Either, for scheduled reconciliation runs: seconds between runs, or a 5-field cron line (UTC).
    schedule_interval_seconds: float | None = Field(default=None, ge=1, le=366 * 86400)
    """Seconds between scheduled full runs (reconciliation); text may say a duration instead (`2h`, `30m`, `1h30m`, `1d`)."""
    schedule_cron: str | None = Field(default=None, max_length=120)
    """A 5-field cron line (UTC) for scheduled full runs, instead of an interval."""

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

    @field_validator("schedule_interval_seconds", mode="before")
    @classmethod
    def _interval_as_written(cls, value: Any) -> Any:
        # A form or a toml file may say "2h" or "7200"; numbers pass through to the range check.
        if isinstance(value, str):
            from headwater.sources.intervals import parse_interval

            return parse_interval(value)
        return value

    @field_validator("schedule_cron")
    @classmethod
    def _cron_parses(cls, value: str | None) -> str | None:
        if value is not None:
            check_cron(value)
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


def declared_sources(settings: Settings) -> list[SourceConfig]:
    """Sources declared in the config file (none when the file does not exist)."""
    from connectors import InvalidSource
    from connectors.base import problems_of

    sources = []
    for number, entry in enumerate(settings.declared_source_entries, 1):
        try:
            sources.append(SourceConfig.model_validate(entry))
        except ValidationError as error:
            name = entry.get("id", f"#{number}") if isinstance(entry, dict) else f"#{number}"
            raise InvalidSource([(f"{settings.config_file}: [[sources]] {name}: {field}", message) for field, message
                                 in problems_of(error, known=list(SourceConfig.model_fields))]) from None
    seen: set[str] = set()
    for source in sources:
        if source.id in seen:
            raise ValueError(f"{settings.config_file}: source id {source.id!r} is declared twice")
        seen.add(source.id)
    return sources

def declared_source(settings: Settings, source_id: str) -> SourceConfig | None:
    """The declared source with this id, if any."""
    return next((s for s in declared_sources(settings) if s.id == source_id), None)

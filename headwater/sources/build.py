"""Sources into connectors: the one place a configured source (headwater.toml, the API, the dashboard)
or a command line's target (a folder, a URL, a declared id) becomes a connector of this process.

Validation is the source model's (SourceConfig.parse and each kind's options model, through
connectors.build_connector); what is added here is this process's part: never index the embedded
Chroma directory itself, and keep a crawl's state next to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from connectors.base import Checkable, KeepsState
from headwater.errors import ConfigurationError
from headwater.settings import Settings
from headwater.sources.model import SourceConfig, declared_source


def _without_the_index(settings: Settings, kind: str, options: dict[str, Any]) -> dict[str, Any]:
    """A folder source's options, excluding the embedded Chroma directory when it lies inside the folder."""
    if kind != "folder":
        return options
    from connectors import validate_options

    folder = validate_options("folder", options)
    root = Path(folder.path)
    chroma = Path(settings.chroma_path).resolve()
    if chroma == root or root in chroma.parents:
        return {**options, "exclude": [*folder.exclude, chroma.relative_to(root).as_posix() + "/**"]}
    return options


def _for_this_process(settings: Settings, connector: Any) -> Any:
    if isinstance(connector, KeepsState):  # a crawl's validators and links, next to the embedded Chroma
        connector.keep_state_in(Path(settings.chroma_path).parent / "crawl")
    return connector


def runtime_options(settings: Settings, kind: str) -> dict[str, Any]:
    """What this process gives a connector besides its options (each host's own directories)."""
    return {"cache_dir": settings.git_cache_dir} if kind == "git" else {}


def build_source_connector(settings: Settings, config: SourceConfig, **overrides: Any) -> Any:
    """The connector of a configured source; connectors.InvalidSource names a bad option."""
    from connectors import build_connector

    options = _without_the_index(settings, config.kind, {**config.options, **overrides})
    connector = build_connector(config.kind, config.id, options, **runtime_options(settings, config.kind))
    return _for_this_process(settings, connector)


def connector_for_target(target: str, settings: Settings, source_id: str | None = None,
                         include: list[str] | None = None, exclude: list[str] | None = None,
                         check: bool = True, **event_options: Any) -> Any:
    """A declared source (headwater.toml) by id, a source URL (s3://, git+, https://), or a folder by path.

    `include` and `exclude` apply to a URL or a folder (a declared source has its own);
    `event_options` (queue_url, allow_private_addresses; None: not given) to any. A connector that
    can check its source (bucket and credentials) does so here, so that a wrong name or a refused
    credential is one clear error before anything starts.
    """
    from connectors import build_connector, kind_for_url, url_source

    given = {name: value for name, value in event_options.items() if value is not None}
    globs = {name: value for name, value in (("include", include), ("exclude", exclude)) if value}
    declared = declared_source(settings, target)
    if declared is not None:
        if declared.collection:
            settings.collection = declared.collection
        connector = build_source_connector(settings, declared, **given)
    elif kind_for_url(target) is not None or "://" in target:
        kind, source_id, validated = url_source(target, source_id, **globs, **given)  # an unknown scheme names the known
        connector = _for_this_process(settings, build_connector(kind, source_id, validated,
                                                                **runtime_options(settings, kind)))
    else:
        path = Path(target).expanduser()
        if not path.is_dir():
            raise ConfigurationError(f"{target} is neither a directory nor a source declared in {settings.config_file}; "
                                     "check the path, or declare the source there")
        root = str(path.resolve())
        folder = SourceConfig(id=source_id or root, kind="folder", options={
            "path": root, "debounce_seconds": settings.watch_debounce_seconds, **globs, **given})
        connector = build_source_connector(settings, folder)
    if check and isinstance(connector, Checkable):
        connector.check()
    return connector

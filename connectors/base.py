"""What a connector can do, one small Protocol per capability, and the registry of source kinds."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from headwater.models import DocumentChange


@dataclass(frozen=True)
class DocumentStat:
    size: int
    modified_time: float | None
    # The connector's fingerprint of what is there now (mtime:size, an ETag): the version of the
    # bytes about to be read, which can be newer than the change that asked for them.
    version: str | None = None
    # Where the document lives in its source's own terms (s3://bucket/key), when that says more
    # than its uri; chunks carry it as their `url`.
    url: str | None = None
    # More of what the source knows about the document (a git file's repository, commit, language);
    # every chunk of it carries these keys.
    metadata: dict[str, Any] | None = None


@runtime_checkable
class Lister(Protocol):
    """Lists every document a source holds now (for full syncs and reconciliation)."""

    source_id: str

    def list_documents(self) -> Iterator[DocumentChange]: ...


@runtime_checkable
class Reader(Protocol):
    """Reads one document's bytes."""

    def stat(self, uri: str) -> DocumentStat: ...

    def read(self, uri: str, limit: int) -> bytes: ...


@runtime_checkable
class EventSource(Protocol):
    """Reports changes as they happen. `on_changes(None)` asks for a full rescan (e.g. a moved directory)."""

    def watch(self, on_changes: Callable[[list[DocumentChange] | None], None], stop: threading.Event) -> None: ...


ConnectorFactory = Callable[..., Any]
_REGISTRY: dict[str, ConnectorFactory] = {}
# URL scheme (s3) -> source kind, for commands given a URL instead of a folder or a source id.
_SCHEMES: dict[str, str] = {}


def register_connector(kind: str, factory: ConnectorFactory, url_schemes: tuple[str, ...] = ()) -> None:
    """Register the factory for a source kind; a kind (and a URL scheme) can be registered once.

    A kind with URL schemes has a factory with a `from_url(url, source_id=None, **options)` classmethod.
    """
    if kind in _REGISTRY:
        raise ValueError(f"a connector for source kind {kind!r} is already registered")
    taken = [s for s in url_schemes if s in _SCHEMES]
    if taken:
        raise ValueError(f"URL scheme {taken[0]!r} already belongs to source kind {_SCHEMES[taken[0]]!r}")
    _REGISTRY[kind] = factory
    _SCHEMES.update({scheme: kind for scheme in url_schemes})


def kind_for_url(target: str) -> str | None:
    """The source kind whose URLs look like `target` (scheme://...), or None."""
    _load_builtin()
    scheme, sep, _ = target.partition("://")
    return _SCHEMES.get(scheme.lower()) if sep else None


def build_connector_for_url(url: str, source_id: str | None = None, **options: Any) -> Any:
    """A connector for a URL such as s3://bucket/prefix."""
    kind = kind_for_url(url)
    if kind is None:
        known = ", ".join(f"{s}://" for s in sorted(_SCHEMES)) or "none"
        raise ValueError(f"no source kind reads {url.partition('://')[0]}:// URLs (known: {known})")
    return _REGISTRY[kind].from_url(url, source_id=source_id, **options)


def registered_kinds() -> list[str]:
    _load_builtin()
    return sorted(_REGISTRY)


def build_connector(kind: str, source_id: str, **options: Any) -> Any:
    """A connector instance for a source of this kind."""
    _load_builtin()
    try:
        factory = _REGISTRY[kind]
    except KeyError:
        raise ValueError(f"unknown source kind {kind!r}; known kinds: {', '.join(sorted(_REGISTRY))}") from None
    return factory(source_id=source_id, **options)


def _load_builtin() -> None:
    # Each module registers itself on import; boto3 and git are used only when such a source is.
    import connectors.folder  # noqa: F401
    import connectors.git  # noqa: F401
    import connectors.s3  # noqa: F401

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


def register_connector(kind: str, factory: ConnectorFactory) -> None:
    """Register the factory for a source kind; a kind can be registered once."""
    if kind in _REGISTRY:
        raise ValueError(f"a connector for source kind {kind!r} is already registered")
    _REGISTRY[kind] = factory


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
    import connectors.folder  # noqa: F401  (registers itself)

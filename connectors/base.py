"""What a connector can do, one small Protocol per capability; the options model every kind's options
extend; and the registry of source kinds, the one place a source's options are validated and its
connector built."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Protocol, runtime_checkable

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

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
    # What the bytes are when the uri does not say (a web page's Content-Type); None: judged by the uri.
    mime_type: str | None = None


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


class Found(Protocol):
    """What fetching one URL found, as crawl discovery needs it (connectors.web_crawl.Visit is one)."""

    url: str  # as requested
    uri: str | None  # where it led (after redirects)
    kind: str  # page | not_modified | gone | failed | skipped
    version: str | None
    reason: str
    links: list[str]
    # Gone (404/410) and never fetched before: a link to nothing, reported, not a deletion.
    broken: bool

    @property
    def elsewhere(self) -> str | None:
        """The URL this document is indexed under instead of its own (where it redirects, or its
        canonical URL when that is another page in scope); None: its own."""


@runtime_checkable
class Discoverer(Protocol):
    """Finds documents while fetching others (a website's links). It supplies the facts; what a crawl
    visits is decided in headwater.pipeline.discovery and executed by embedded mode's crawl pass
    (headwater.sync.crawl_pass) or the fleet's list, fetch and finish steps."""

    source_id: str
    max_pages: int
    max_depth: int
    parallel_fetches: int  # fetches at once in one process (embedded mode; the fleet's are its workers)
    refused: dict[str, str]  # URLs left out of the crawl and why (for reports and tests)

    def seed_urls(self) -> tuple[list[str], list[str]]:
        """The start URLs and the sitemaps' pages (reading robots.txt and the sitemaps)."""

    def refusal(self, url: str) -> str | None:
        """Why the source leaves a URL out (another host, the patterns, a trap, robots.txt), or None."""

    def visit(self, url: str) -> Found:
        """Fetch one URL, keeping what it found for this connector's reads of the document."""

    def visited(self, uri: str) -> Found | None:
        """What this connector's read of `uri` found (None: it was not read here)."""

    def crawled(self, urls: Collection[str]) -> None:
        """A crawl admitted these URLs and ended: what is remembered of any other URL can go."""


@runtime_checkable
class EventSource(Protocol):
    """Reports changes as they happen. `on_changes(None)` asks for a full rescan (e.g. a moved directory)."""

    def watch(self, on_changes: Callable[[list[DocumentChange] | None], None], stop: threading.Event) -> None: ...


@runtime_checkable
class Checkable(Protocol):
    """Can check, with one request, that its source answers (a bucket that exists, credentials that work)."""

    def check(self) -> None: ...


@runtime_checkable
class HasCursor(Protocol):
    """Reads its source at a position worth remembering between passes (a git source's commit)."""

    @property
    def cursor(self) -> str | None: ...


@runtime_checkable
class FollowsHead(Protocol):
    """A source whose full run reads one fixed position: fetch, then the connector pinned to the newest."""

    def pinned_to_head(self) -> Any: ...


@runtime_checkable
class KeepsState(Protocol):
    """Keeps what it learnt between passes (a crawl's validators and links) in a directory, in embedded mode."""

    def keep_state_in(self, directory: Path) -> None: ...


@runtime_checkable
class AcknowledgedEvents(Protocol):
    """An EventSource whose events are acknowledged (an SQS message deleted) only once on_changes returned;
    messages it cannot read are dead-lettered through `on_dead_letter(message_id, reason, body)`."""

    def watch(self, on_changes: Callable[[list[DocumentChange] | None], None], stop: threading.Event,
              on_dead_letter: Callable[[str, str, str], None] | None = None) -> None: ...

    def event_counts(self) -> dict[str, int]: ...


@runtime_checkable
class Closeable(Protocol):
    """Holds resources (HTTP clients, temporary files) to release once a step is done with it."""

    def close(self) -> None: ...


# Options ---------------------------------------------------------------------------------------------

_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,127}$")


def _env_name(value: str) -> str:
    if not _ENV_NAME.match(value):
        # Never echo the value: it may be the secret itself, pasted where its variable's name belongs.
        raise ValueError("must name an environment variable (A-Z, 0-9 and _, such as GITHUB_TOKEN) that holds "
                         "the secret, never the secret itself")
    return value


# A secret, referenced by the name of the environment variable that holds it where the source is read.
EnvName = Annotated[str, AfterValidator(_env_name)]


class SourceOptions(BaseModel):
    """A source kind's options: JSON, validated once, whatever surface they came through.

    `runtime` names the connector's constructor arguments that are objects of the running process
    (a crawl's state store, a cache directory), given by the code that builds it, never by a user.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    runtime: ClassVar[frozenset[str]] = frozenset()


class InvalidSource(ValueError):
    """A source's configuration was refused: `field` (options.bucket, kind, ...) and a message that says what to do."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{field}: {message}" if field else message for field, message in problems))

    @property
    def fields(self) -> list[str]:
        return [field for field, _ in self.problems]


def problems_of(error: ValidationError, prefix: str = "", known: list[str] | None = None) -> list[tuple[str, str]]:
    """pydantic's errors as (field, human message) pairs: no input values (they may hold secrets), no Python.

    `known`: the field names an unknown one is told apart from (a misspelt option must not be ignored).
    """
    found = []
    for item in error.errors(include_input=False, include_url=False):
        field = ".".join(str(part) for part in ((prefix,) if prefix else ()) + tuple(item["loc"]))
        kind, message = item["type"], item["msg"]
        if kind == "extra_forbidden":
            message = "unknown option" + (f"; known: {', '.join(known)}" if known else " (check its spelling)")
        elif kind == "missing":
            message = "required"
        elif kind == "value_error":
            message = message.removeprefix("Value error, ")
        elif kind == "assertion_error":
            message = message.removeprefix("Assertion failed, ")
        found.append((field, message))
    return found


@dataclass(frozen=True)
class SourceKind:
    """A registered kind: how to build its connector and the model its options must fit."""

    name: str
    factory: Callable[..., Any]
    options: type[SourceOptions]


_REGISTRY: dict[str, SourceKind] = {}
# URL scheme (s3) -> source kind, for commands given a URL instead of a folder or a source id.
_SCHEMES: dict[str, str] = {}


def register_connector(kind: str, factory: Callable[..., Any], options: type[SourceOptions] = SourceOptions,
                       url_schemes: tuple[str, ...] = ()) -> None:
    """Register the factory and options model of a source kind; a kind (and a URL scheme) can be registered once.

    A kind with URL schemes has a factory with a `url_options(url) -> (default source id, options)` classmethod.
    """
    if kind in _REGISTRY:
        raise ValueError(f"a connector for source kind {kind!r} is already registered")
    taken = [s for s in url_schemes if s in _SCHEMES]
    if taken:
        raise ValueError(f"URL scheme {taken[0]!r} already belongs to source kind {_SCHEMES[taken[0]]!r}")
    _REGISTRY[kind] = SourceKind(kind, factory, options)
    _SCHEMES.update({scheme: kind for scheme in url_schemes})


def kind_for_url(target: str) -> str | None:
    """The source kind whose URLs look like `target` (scheme://...), or None."""
    _load_builtin()
    scheme, sep, _ = target.partition("://")
    return _SCHEMES.get(scheme.lower()) if sep else None


def source_kind(kind: str) -> SourceKind:
    """The registered kind, or InvalidSource naming the known ones."""
    _load_builtin()
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise InvalidSource([("kind", f"unknown source kind {kind!r}; known kinds: {', '.join(sorted(_REGISTRY))}")]
                            ) from None


def validate_options(kind: str, options: dict[str, Any] | SourceOptions) -> SourceOptions:
    """The one validation of a source's options: its kind's model, or InvalidSource naming each bad field."""
    model = source_kind(kind).options
    if isinstance(options, model):
        return options
    if not isinstance(options, dict):
        raise InvalidSource([("options", f"must be a table of {kind} options")])
    try:
        return model.model_validate(options)
    except ValidationError as error:
        raise InvalidSource(problems_of(error, "options", list(model.model_fields))) from None


def url_source(url: str, source_id: str | None = None, **options: Any) -> tuple[str, str, SourceOptions]:
    """(kind, source id, validated options) of a URL such as s3://bucket/prefix; the id defaults to the URL's."""
    kind = kind_for_url(url)
    if kind is None:
        known = ", ".join(f"{s}://" for s in sorted(_SCHEMES)) or "none"
        raise InvalidSource([("", f"no source kind reads {url.partition('://')[0]}:// URLs (known: {known})")])
    default_id, from_url = _REGISTRY[kind].factory.url_options(url)
    return kind, source_id or default_id, validate_options(kind, {**from_url, **options})


def build_connector_for_url(url: str, source_id: str | None = None, **options: Any) -> Any:
    """A connector for a URL such as s3://bucket/prefix (options as build_connector takes them)."""
    kind = kind_for_url(url)
    runtime = _REGISTRY[kind].options.runtime if kind is not None else frozenset()
    given = {name: options.pop(name) for name in list(options) if name in runtime}
    kind, source_id, validated = url_source(url, source_id, **options)
    return build_connector(kind, source_id, validated, **given)


def registered_kinds() -> list[str]:
    _load_builtin()
    return sorted(_REGISTRY)


def build_connector(kind: str, source_id: str, options: dict[str, Any] | SourceOptions | None = None,
                    **more: Any) -> Any:
    """A connector for a source of this kind, its options validated by the kind's model first.

    Options come as a dict or model, or as keywords; keywords the model lists as `runtime` are
    handed to the connector as they are (objects of this process, never user input).
    """
    entry = source_kind(kind)
    runtime = {name: more.pop(name) for name in list(more) if name in entry.options.runtime}
    if isinstance(options, SourceOptions) and not more:
        validated = validate_options(kind, options)
    else:
        given = options.model_dump(exclude_unset=True) if isinstance(options, SourceOptions) else (options or {})
        validated = validate_options(kind, {**given, **more})
    return entry.factory(source_id=source_id, **validated.model_dump(), **runtime)


def _load_builtin() -> None:
    # Each module registers itself on import; boto3, git and httpx are used only when such a source is.
    import connectors.folder  # noqa: F401
    import connectors.git  # noqa: F401
    import connectors.s3  # noqa: F401
    import connectors.web  # noqa: F401

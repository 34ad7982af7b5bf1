"""What every `headwater` command shares: consoles, common options, settings and source resolution."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from headwater.errors import ConfigurationError
from headwater.settings import Settings, load_settings

# Libraries that report each malformed input on stderr as they parse: their words go to the log,
# and Headwater's own report says what failed and why. `--verbose` shows them.
CHATTY_LIBRARIES = ("pypdf", "pdfminer", "pikepdf", "unstructured", "unstructured_inference", "PIL", "httpx",
                    "chromadb", "transformers", "celery.redirected")


def configure_logging(verbose: bool) -> None:
    """Warnings of Headwater on stderr; the parsing libraries' only with --verbose."""
    import logging

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for name in CHATTY_LIBRARIES:
        logging.getLogger(name).setLevel(logging.WARNING if verbose else logging.ERROR)

out = Console()
err = Console(stderr=True)


def _setting(name: str) -> dict[str, Any]:
    """Help for an option that overrides a setting: its environment variable and the setting's default."""
    return {"envvar": f"HEADWATER_{name.upper()}", "show_default": str(Settings.model_fields[name].default)}


CollectionOpt = Annotated[Optional[str], typer.Option("--collection", help="Chroma collection name.", **_setting("collection"))]
ChromaPathOpt = Annotated[Optional[Path], typer.Option("--chroma-path", help="Embedded Chroma directory.",
                                                       **_setting("chroma_path"))]
SourceIdOpt = Annotated[Optional[str], typer.Option(
    "--source-id", help="Stable id for this folder (default: its absolute path).")]
IncludeOpt = Annotated[Optional[list[str]], typer.Option("--include", help="Glob of files to index (repeatable).")]
ExcludeOpt = Annotated[Optional[list[str]], typer.Option("--exclude", help="Glob of files to leave out (repeatable).")]
AllowMassDeleteOpt = Annotated[bool, typer.Option(
    "--allow-mass-delete", help="Let this pass delete more than half of the source's documents (or all of them).")]


def cli_settings(collection: str | None = None, chroma_path: Path | None = None) -> Settings:
    return load_settings(collection=collection, chroma_path=chroma_path)


QueueUrlOpt = Annotated[Optional[str], typer.Option(
    "--queue-url", help="S3 sources: the SQS queue that receives the bucket's event notifications.")]
AllowPrivateAddressesOpt = Annotated[bool, typer.Option(
    "--allow-private-addresses", help="Web sources: let the crawl reach private, loopback and link-local "
                                      "addresses (an intranet site); cloud metadata addresses stay refused.")]


def resolve_connector(target: str, settings: Settings, source_id: str | None, include: list[str] | None,
                      exclude: list[str] | None, **event_options: Any) -> Any:
    """A declared source (headwater.toml) by id, a source URL (s3://, git+, https://), or a folder by path.

    A connector that can check its source (bucket and credentials) does so here, so that a wrong
    name or a refused credential is one clear error before anything starts.
    """
    connector = _connector_for(target, settings, source_id, include, exclude,
                               {k: v for k, v in event_options.items() if v is not None})
    check = getattr(connector, "check", None)
    if check is not None:
        check()
    keep_state_in = getattr(connector, "keep_state_in", None)
    if keep_state_in is not None:  # a crawl's validators and links, next to the embedded Chroma
        keep_state_in(settings.chroma_path.parent / "crawl")
    return connector


def _connector_for(target: str, settings: Settings, source_id: str | None, include: list[str] | None,
                   exclude: list[str] | None, event_options: dict[str, Any]) -> Any:
    from connectors import build_connector, build_connector_for_url, kind_for_url
    from connectors.folder import DEFAULT_EXCLUDE

    declared = settings.source(target)
    if declared is not None:
        if declared.collection:
            settings.collection = declared.collection
        return build_connector(declared.kind, declared.id, **{**declared.options, **event_options})
    if kind_for_url(target) is not None:
        return build_connector_for_url(target, source_id, include=include or ["**"], exclude=exclude or [],
                                       **event_options)
    if "://" in target:
        build_connector_for_url(target)  # raises, naming the URL schemes that are known
    if event_options:
        raise ConfigurationError(f"--{next(iter(event_options)).replace('_', '-')} is not an option of folder sources")
    path = Path(target).expanduser()
    if not path.is_dir():
        raise ConfigurationError(f"{target} is neither a directory nor a source declared in {settings.config_file}; "
                                 "check the path, or declare the source there")
    root = path.resolve()
    excludes = list(exclude or DEFAULT_EXCLUDE)
    chroma = settings.chroma_path.resolve()
    if chroma == root or root in chroma.parents:  # never index the index
        excludes.append(chroma.relative_to(root).as_posix() + "/**")
    return build_connector("folder", source_id or str(root), path=root, include=include or ["**"],
                           exclude=excludes, debounce_seconds=settings.watch_debounce_seconds)


def fail(exc: Exception) -> None:
    err.print(f"[red]error:[/red] {exc}")
    raise typer.Exit(1)


def stop_on_signals() -> threading.Event:
    """An event set by Ctrl-C or SIGTERM."""
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    return stop


def announce_dead_letter(record: Any) -> Any:
    """Record a dead-lettered event message and say so on stderr."""
    def dead_letter(message_id: str, reason: str, body: str) -> None:
        record(message_id, reason, body)
        err.print(f"[yellow]dead-lettered[/yellow] event message {message_id}: {reason}")
    return dead_letter


def print_event_counts(connector: Any) -> None:
    """What an event consumer saw: messages, changes, ignored, stale and dead-lettered events."""
    consumer = getattr(connector, "consumer", None)
    if consumer is not None and consumer.counts:
        err.print("events: " + ", ".join(f"{name.replace('_', ' ')} {count}" for name, count in sorted(consumer.counts.items())))

"""What every `headwater` command shares: consoles, common options, settings and source resolution."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from connectors.base import AcknowledgedEvents
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
    """A declared source (headwater.toml) by id, a source URL (s3://, git+, https://), or a folder by path,
    built and checked through the one source model (headwater.sources)."""
    from headwater.sources import connector_for_target

    return connector_for_target(target, settings, source_id, include, exclude, **event_options)


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


def print_event_counts(connector: AcknowledgedEvents) -> None:
    """What an event consumer saw: messages, changes, ignored, stale and dead-lettered events."""
    counts = connector.event_counts()
    if counts:
        err.print("events: " + ", ".join(f"{name.replace('_', ' ')} {count}" for name, count in sorted(counts.items())))

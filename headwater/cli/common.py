"""What every `headwater` command shares: consoles, common options, settings and source resolution."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from typer.core import TyperGroup

from connectors.base import AcknowledgedEvents
from headwater import exit_codes
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


# click's UsageError as typer raises it: typer vendors its own copy of click since 0.2x, so the class
# is found through one typer exports rather than imported from click.
_UsageError = next(cls for cls in typer.BadParameter.__mro__ if cls.__name__ == "UsageError")


class HeadwaterGroup(TyperGroup):
    """The `headwater` command group: usage errors exit with their own code, placeholders read like words.

    click exits 2 for a usage error, and 2 is what a sync with failed documents exits with; a
    script must be able to tell "you called it wrong" from "it ran, some documents failed", so a
    usage error exits exit_codes.USAGE. It is raised while a command line is parsed (the group's,
    then the command's, which the group's invoke parses) and shown by click with the code it carries.

    typer shows a value's type as its placeholder (`--source <str>`, `sync {path}`, `path <str>`); a
    parameter without a metavar of its own gets its name in capitals instead (`--source SOURCE`),
    and an argument is shown as click shows it (`sync PATH`, `runs [RUN_ID]`), without its type.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for command in self.commands.values():
            for param in command.params:
                if param.metavar is None and not getattr(param, "is_flag", False):
                    param.metavar = param.name.upper()
                if param.param_type_name == "argument":  # typer's methods, replaced on these instances only
                    param.display_type_rich = lambda ctx: None
                    param.get_usage_pieces = lambda ctx, p=param: [p.metavar if p.required else f"[{p.metavar}]"]

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().make_context(*args, **kwargs)
        except _UsageError as exc:
            exc.exit_code = exit_codes.USAGE
            raise

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except _UsageError as exc:
            exc.exit_code = exit_codes.USAGE
            raise


def _setting(name: str) -> dict[str, Any]:
    """Help for an option that overrides a setting: its environment variable and the setting's default."""
    return {"envvar": f"HEADWATER_{name.upper()}", "show_default": str(Settings.model_fields[name].default)}


CollectionOpt = Annotated[Optional[str], typer.Option("--collection", metavar="NAME", help="Chroma collection name.",
                                                     **_setting("collection"))]
ChromaPathOpt = Annotated[Optional[Path], typer.Option("--chroma-path", metavar="PATH", help="Embedded Chroma directory.",
                                                       **_setting("chroma_path"))]
SourceIdOpt = Annotated[Optional[str], typer.Option(
    "--source-id", metavar="ID", help="Stable id for this folder (default: its absolute path).")]
IncludeOpt = Annotated[Optional[list[str]], typer.Option("--include", metavar="GLOB",
                                                         help="Glob of files to index (repeatable).")]
ExcludeOpt = Annotated[Optional[list[str]], typer.Option("--exclude", metavar="GLOB",
                                                         help="Glob of files to leave out (repeatable).")]
AllowMassDeleteOpt = Annotated[bool, typer.Option(
    "--allow-mass-delete", help="Let this pass delete more than half of the source's documents (or all of them).")]


def cli_settings(collection: str | None = None, chroma_path: Path | None = None) -> Settings:
    return load_settings(collection=collection, chroma_path=chroma_path)


QueueUrlOpt = Annotated[Optional[str], typer.Option(
    "--queue-url", metavar="URL", help="S3 sources: the SQS queue that receives the bucket's event notifications.")]
AllowPrivateAddressesOpt = Annotated[bool, typer.Option(
    "--allow-private-addresses", help="Web sources: let the crawl reach private, loopback and link-local "
                                      "addresses (an intranet site); cloud metadata addresses stay refused.")]


def resolve_connector(target: str, settings: Settings, source_id: str | None, include: list[str] | None,
                      exclude: list[str] | None, **event_options: Any) -> Any:
    """A declared source (headwater.toml) by id, a source URL (s3://, git+, https://), or a folder by path,
    built and checked through the one source model (headwater.sources)."""
    from headwater.sources.build import connector_for_target

    return connector_for_target(target, settings, source_id, include, exclude, **event_options)


def fail(exc: Exception) -> None:
    err.print(f"[red]error:[/red] {exc}")
    raise typer.Exit(exit_codes.ERROR)


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

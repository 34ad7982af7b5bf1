"""The `headwater` command: sync, watch, query, status, doctor."""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import headwater.offline  # noqa: F401
from headwater.errors import HeadwaterError
from headwater.report import SyncReport
from headwater.settings import Settings, load_settings

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Keep data sources in sync with a Chroma collection.")
out = Console()
err = Console(stderr=True)

CollectionOpt = Annotated[Optional[str], typer.Option("--collection", help="Chroma collection name.")]
ChromaPathOpt = Annotated[Optional[Path], typer.Option("--chroma-path", help="Embedded Chroma directory.")]
SourceIdOpt = Annotated[Optional[str], typer.Option(
    "--source-id", help="Stable id for this folder (default: its absolute path).")]
IncludeOpt = Annotated[Optional[list[str]], typer.Option("--include", help="Glob of files to index (repeatable).")]
ExcludeOpt = Annotated[Optional[list[str]], typer.Option("--exclude", help="Glob of files to leave out (repeatable).")]


def _settings(collection: str | None = None, chroma_path: Path | None = None) -> Settings:
    return load_settings(collection=collection, chroma_path=chroma_path)


def _connector(target: str, settings: Settings, source_id: str | None, include: list[str] | None,
               exclude: list[str] | None) -> Any:
    """A declared source (headwater.toml) by id, or a folder by path."""
    from connectors import build_connector
    from connectors.folder import DEFAULT_EXCLUDE

    declared = settings.source(target)
    if declared is not None:
        if declared.collection:
            settings.collection = declared.collection
        return build_connector(declared.kind, declared.id, **declared.options)
    path = Path(target).expanduser()
    if not path.is_dir():
        raise typer.BadParameter(f"{target} is neither a directory nor a source declared in {settings.config_file}")
    root = path.resolve()
    excludes = list(exclude or DEFAULT_EXCLUDE)
    chroma = settings.chroma_path.resolve()
    if chroma == root or root in chroma.parents:  # never index the index
        excludes.append(chroma.relative_to(root).as_posix() + "/**")
    return build_connector("folder", source_id or str(root), path=root, include=include or ["**"],
                           exclude=excludes, debounce_seconds=settings.watch_debounce_seconds)


class _RichProgress:
    """Progress bars on stderr for documents and embedded chunks."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._docs = progress.add_task("documents", total=0)
        self._chunks = progress.add_task("chunks embedded", total=None)

    def start(self, total_documents: int) -> None:
        self._progress.reset(self._docs, total=total_documents)

    def document_done(self, uri: str) -> None:
        self._progress.advance(self._docs)

    def embedded(self, count: int) -> None:
        self._progress.advance(self._chunks, count)


def _progress_bars() -> Progress:
    return Progress(TextColumn("{task.description:>16}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err, transient=False, disable=not err.is_terminal)


def _print_report(report: SyncReport) -> None:
    table = Table(title=f"Sync of {report.source_id} in {report.seconds:.1f}s", show_edge=False)
    table.add_column("documents", justify="left")
    table.add_column("", justify="right")
    table.add_column("chunks", justify="left")
    table.add_column("", justify="right")
    rows = [("added", report.added, "embedded", report.chunks_embedded),
            ("updated", report.updated, "reused", report.chunks_reused),
            ("unchanged", report.unchanged, "unchanged", report.chunks_unchanged),
            ("moved", report.moved, "written", report.chunks_written),
            ("deleted", report.deleted, "deleted", report.chunks_deleted),
            ("skipped", len(report.skipped), "", ""),
            ("failed", len(report.failed), "", "")]
    for row in rows:
        table.add_row(*(str(c) for c in row))
    out.print(table)
    for title, entries, style in (("Skipped", report.skipped, "yellow"), ("Failed", report.failed, "red")):
        if entries:
            listing = Table(title=title, show_edge=False, title_style=style)
            listing.add_column("document")
            listing.add_column("reason")
            for uri, reason in sorted(entries.items()):
                listing.add_row(uri, reason)
            out.print(listing)


def _fail(exc: Exception) -> None:
    err.print(f"[red]error:[/red] {exc}")
    raise typer.Exit(1)


@app.command()
def sync(path: Annotated[str, typer.Argument(help="A folder, or a source id from headwater.toml.")],
         collection: CollectionOpt = None, chroma_path: ChromaPathOpt = None, source_id: SourceIdOpt = None,
         include: IncludeOpt = None, exclude: ExcludeOpt = None,
         fleet: Annotated[bool, typer.Option("--fleet", help="Queue the sync for the worker fleet.")] = False,
         wait: Annotated[bool, typer.Option("--wait", help="With --fleet: wait for the run to finish.")] = False) -> None:
    """Sync a source once; exits 2 if some documents failed (the others are still indexed)."""
    from headwater.embedded import open_engine

    if fleet:
        _fleet_sync(path, collection, source_id, include, exclude, wait)
        return
    try:
        settings = _settings(collection, chroma_path)
        connector = _connector(path, settings, source_id, include, exclude)
        with _progress_bars() as bars, open_engine(settings, _RichProgress(bars)) as engine:
            report = engine.sync(connector)
    except (HeadwaterError, ValueError) as exc:
        _fail(exc)
    _print_report(report)
    raise typer.Exit(report.exit_code)


def _fleet_client(settings: Settings) -> Any:
    from headwater.fleet import Fleet
    from workers import names
    from workers.celery_app import create_app

    celery = create_app(settings)

    def send(task: str, args: list, countdown: float | None = None) -> None:
        celery.send_task(task, args=args, countdown=countdown, queue=names.ROUTES[task])

    return Fleet(settings, send)


def _fleet_sync(path: str, collection: str | None, source_id: str | None, include: list[str] | None,
                exclude: list[str] | None, wait: bool) -> None:
    import time

    from headwater.fleet import enqueue_sync

    try:
        settings = _settings(collection)
        if not (settings.chroma_host or settings.is_cloud):
            raise ValueError("fleet mode needs a Chroma server: set HEADWATER_CHROMA_HOST (several workers "
                             "writing one embedded Chroma directory corrupt its index)")
        connector = _connector(path, settings, source_id, include, exclude)
        fleet = _fleet_client(settings)
        options = {"path": str(connector.root), "include": list(connector.include), "exclude": list(connector.exclude)}
        run_id = enqueue_sync(fleet, connector.kind, connector.source_id, options)
    except (HeadwaterError, ValueError) as exc:
        _fail(exc)
    out.print(f"queued run {run_id}")
    if not wait:
        return
    while not (run := fleet.runs.get(run_id)).status.finished:
        time.sleep(0.5)
    _print_runs([run])
    raise typer.Exit(2 if run.errors else 0)


@app.command()
def worker(queues: Annotated[Optional[str], typer.Option("--queues", help="Comma-separated queues (default: all).")] = None,
           concurrency: Annotated[int, typer.Option("--concurrency", "-c", min=1, help="Processes.")] = 1) -> None:
    """Run a fleet worker: pulls work from Redis, writes to the Chroma server. Needs no inbound port."""
    from workers import names
    from workers.celery_app import app as celery

    settings = load_settings()
    if not (settings.chroma_host or settings.is_cloud):
        _fail(ValueError("workers need a Chroma server: set HEADWATER_CHROMA_HOST (and HEADWATER_CHROMA_PORT)"))
    wanted = queues.split(",") if queues else list(names.ALL_QUEUES)
    unknown = sorted(set(wanted) - set(names.ALL_QUEUES))
    if unknown:
        _fail(ValueError(f"unknown queues {', '.join(unknown)}; known: {', '.join(names.ALL_QUEUES)}"))
    celery.worker_main(["worker", "-Q", ",".join(wanted), "-c", str(concurrency), "--loglevel", "INFO",
                        "--without-gossip", "--without-mingle"])


@app.command()
def runs(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
         limit: Annotated[int, typer.Option("--limit", min=1, help="How many, newest first.")] = 20) -> None:
    """Sync runs of the fleet, newest first, with status and counters."""
    from headwater.fleet import redis_client
    from headwater.runs import RunStore

    listed = RunStore(redis_client(load_settings())).list(limit)
    if as_json:
        print(json.dumps([r.to_json() for r in listed], indent=2))
        return
    _print_runs(listed)


@app.command()
def cancel(run_id: Annotated[str, typer.Argument(help="The run to cancel.")]) -> None:
    """Cancel an unfinished fleet run: its queued documents are dropped, written ones stay."""
    from headwater.fleet import redis_client
    from headwater.runs import RunStore

    if not RunStore(redis_client(load_settings())).cancel(run_id):
        _fail(ValueError(f"run {run_id} does not exist or has already finished"))
    out.print(f"cancelled run {run_id}")


def _print_runs(listed: list) -> None:
    from headwater.runs import COUNTERS

    table = Table(show_edge=False)
    for column in ("run", "source", "status", *COUNTERS):
        table.add_column(column)
    for run in listed:
        row = run.to_json()
        table.add_row(run.id[:12], run.source_id, row["status"], *(str(row[c]) for c in COUNTERS))
    out.print(table)
    for run in listed:
        for uri, reason in run.errors.items():
            out.print(f"[red]{run.id[:12]} {uri}[/red]: {reason}")


@app.command()
def watch(path: Annotated[str, typer.Argument(help="A folder, or a source id from headwater.toml.")],
          collection: CollectionOpt = None, chroma_path: ChromaPathOpt = None, source_id: SourceIdOpt = None,
          include: IncludeOpt = None, exclude: ExcludeOpt = None) -> None:
    """Sync once, then keep the collection in sync with the folder until interrupted (Ctrl-C)."""
    from headwater.embedded import open_engine

    try:
        settings = _settings(collection, chroma_path)
        connector = _connector(path, settings, source_id, include, exclude)
        with open_engine(settings) as engine:
            _print_report(engine.sync(connector))
            _watch_loop(engine, connector)
    except (HeadwaterError, ValueError) as exc:
        _fail(exc)


def _watch_loop(engine: Any, connector: Any) -> None:
    from headwater.watching import run_watch

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    err.print(f"watching {connector.root} (Ctrl-C to stop)")
    run_watch(engine, connector, stop, on_report=_print_changes)
    err.print("stopped")


def _print_changes(report: SyncReport) -> None:
    parts = [f"{name} {count}" for name, count in (
        ("added", report.added), ("updated", report.updated), ("moved", report.moved),
        ("deleted", report.deleted), ("embedded chunks", report.chunks_embedded)) if count]
    parts += [f"failed {uri}: {reason}" for uri, reason in report.failed.items()]
    parts += [f"skipped {uri}: {reason}" for uri, reason in report.skipped.items()]
    if parts:
        out.print("synced: " + ", ".join(parts))


@app.command()
def query(text: Annotated[str, typer.Argument(help="What to search for.")],
          collection: CollectionOpt = None, chroma_path: ChromaPathOpt = None,
          k: Annotated[int, typer.Option("-k", min=1, max=1000, help="Results to return.")] = 5,
          mode: Annotated[str, typer.Option("--mode", help="hybrid (default), dense or sparse.")] = "hybrid",
          source: Annotated[Optional[str], typer.Option("--source", help="Only this source id.")] = None,
          uri_prefix: Annotated[Optional[str], typer.Option("--uri-prefix", help="Only under this path.")] = None,
          where: Annotated[Optional[str], typer.Option("--where", help="A Chroma where filter, as JSON.")] = None,
          as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Search the synced collection: hybrid (dense + SPLADE, fused by RRF) unless --mode says otherwise."""
    from headwater.retrieval import Filters, open_searcher

    try:
        if mode not in ("dense", "sparse", "hybrid"):
            raise ValueError(f"--mode must be dense, sparse or hybrid, not {mode!r}")
        filters = Filters(source, uri_prefix, _where(where))
        hits = open_searcher(_settings(collection, chroma_path)).search(text, k=k, mode=mode, filters=filters)
    except (HeadwaterError, ValueError) as exc:
        _fail(exc)
    if as_json:
        print(json.dumps([h.to_json() for h in hits], indent=2))
        return
    for rank, hit in enumerate(hits, 1):
        where_found = hit.uri + (f" p.{hit.metadata['page']}" if "page" in hit.metadata else "")
        sides = ", ".join(f"{name} #{r}" for name, r in (("dense", hit.dense_rank), ("sparse", hit.sparse_rank)) if r)
        out.print(f"[bold]{rank}. {where_found}[/bold]  score {hit.score:.4f}  ({sides})")
        out.print("   " + " ".join(hit.text.split())[:300])


def _where(raw: str | None) -> dict | None:
    if raw is None:
        return None
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--where is not valid JSON ({exc.msg}); for example --where '{{\"mime_type\": \"application/pdf\"}}'") from None
    if not isinstance(parsed, dict):
        raise ValueError("--where must be a JSON object")
    return parsed


@app.command()
def status(collection: CollectionOpt = None, chroma_path: ChromaPathOpt = None,
           as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Documents and chunks per source."""
    from headwater.chroma_store import ChromaStore

    try:
        settings = _settings(collection, chroma_path)
        summary = ChromaStore.from_settings(settings, create=False).source_summary()
    except (HeadwaterError, ValueError) as exc:
        _fail(exc)
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    table = Table(title=f"Collection {settings.collection}", show_edge=False)
    for column in ("source", "documents", "chunks"):
        table.add_column(column, justify="left" if column == "source" else "right")
    for source, counts in summary.items():
        table.add_row(source, str(counts["documents"]), str(counts["chunks"]))
    out.print(table)


@app.command()
def reindex(collection: CollectionOpt = None, chroma_path: ChromaPathOpt = None) -> None:
    """Rebuild the derived sparse index from the collection alone (it is a cache; this is always safe)."""
    import time

    from headwater.chroma_store import ChromaStore
    from headwater.embedded import sparse_index_dir
    from headwater.path_lock import ChromaPathLock
    from headwater.sparse_index import SparseIndex

    try:
        settings = _settings(collection, chroma_path)
        directory = sparse_index_dir(settings)
        if directory is None:
            raise ValueError("only an embedded Chroma keeps a sparse index on disk; servers rebuild it in memory")
        with ChromaPathLock(settings.chroma_path):
            started = time.perf_counter()
            store = ChromaStore.from_settings(settings, create=False)
            index = SparseIndex.rebuild(store.collection, directory)
            index.persist()
    except (HeadwaterError, ValueError) as exc:
        _fail(exc)
    out.print(f"rebuilt the sparse index of {len(index)} chunks in {time.perf_counter() - started:.1f}s "
              f"({index.nbytes() / 1048576:.1f} MB)")


@app.command()
def doctor() -> None:
    """Check that models and parsers load offline."""
    from workers.embed_dense import DenseEmbedder
    from workers.embed_sparse import SpladeEncoder
    from workers.parse import parse_document

    try:
        settings = load_settings()
        dense = DenseEmbedder(settings.dense_model_dir)
        sparse = SpladeEncoder(settings.sparse_model_dir)
        sample = parse_document("check.md", b"# Check\n\nHeadwater parses this offline.")
        checks = {
            "dense model": f"{dense.name}, {dense.embed(['headwater']).shape[1]} dimensions",
            "sparse model": f"{sparse.name}, {len(sparse.encode(['headwater'])[0][0])} active terms",
            "markdown parser": f"{len(sample.elements)} elements",
        }
    except (HeadwaterError, ValueError, ImportError) as exc:
        _fail(exc)
    for name, detail in checks.items():
        out.print(f"[green]ok[/green] {name}: {detail}")


def main() -> None:  # pragma: no cover
    logging.basicConfig(level=logging.WARNING)
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

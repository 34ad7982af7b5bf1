"""The `headwater` command: sync, watch, query, status, doctor."""

from __future__ import annotations

import json
import textwrap
import logging
from typing import Annotated, Any, Optional

import typer
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

import headwater.offline  # noqa: F401
from connectors.base import AcknowledgedEvents, HasCursor
from headwater import exit_codes
from headwater.cli import consolidate as cli_consolidate, fleet as cli_fleet, push as cli_push
from headwater.cli.common import (AllowMassDeleteOpt, AllowPrivateAddressesOpt, ChromaPathOpt, CollectionOpt, ExcludeOpt,
                                  IncludeOpt, QueueUrlOpt, SourceIdOpt, HeadwaterGroup, announce_dead_letter,
                                  print_event_counts, configure_logging, resolve_connector, fail, cli_settings, err, out,
                                  stop_on_signals)
from headwater.errors import ConfigurationError, HeadwaterError
from headwater.pipeline.report import SyncReport
from headwater.settings import load_settings

# Plain help: typer's rich help shows every flag as `--json <bool>`, as if it took a value.
app = typer.Typer(cls=HeadwaterGroup, add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Keep data sources in sync with a Chroma collection.",
                  epilog=f"Exit status: {exit_codes.OK} done; {exit_codes.ERROR} an error stopped it (the message says "
                         f"what to do); {exit_codes.SOME_FAILED} a sync ran but some documents failed (the report "
                         f"names them); {exit_codes.USAGE} the command line is wrong.")


@app.callback()
def _options(verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Show the parsing libraries' own warnings (malformed PDFs and the like).")] = False) -> None:
    configure_logging(verbose)


class _RichProgress:
    """Progress on stderr: "listing" until the documents to sync are known, then a bar of them; chunks as a count.

    Changed documents are parsed as they stream in, so how many chunks they hold is known only at
    the end: the chunk line shows how many were embedded and how fast, never a bar against a guess.
    """

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._docs = progress.add_task("listing", total=None)
        self._chunks: Any = None

    def start(self, total_documents: int) -> None:
        self._progress.update(self._docs, description="documents", total=total_documents, completed=0)

    def document_done(self, uri: str) -> None:
        self._progress.advance(self._docs)

    def embedded(self, count: int) -> None:
        if self._chunks is None:
            self._chunks = self._progress.add_task("chunks embedded", total=None, completed=count)
        else:
            self._progress.advance(self._chunks, count)


class _BarOnceTotalKnown(BarColumn):
    def render(self, task: Task) -> Any:
        return super().render(task) if task.total is not None else Text("")


class _Count(ProgressColumn):
    """done/total for a task with a total; for one without, what is done so far and its rate."""

    def render(self, task: Task) -> Text:
        if task.total is not None:
            return Text(f"{int(task.completed)}/{int(task.total)}", style="progress.download")
        if not task.completed:
            return Text("")
        rate = f" ({task.speed:.0f}/s)" if task.speed else ""
        return Text(f"{int(task.completed)}{rate}", style="progress.download")


def _progress_bars() -> Progress:
    return Progress(TextColumn("{task.description:>16}"), _BarOnceTotalKnown(), _Count(), TimeElapsedColumn(),
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
    for title, entries, style in (("Warnings", report.warnings, "yellow"), ("Skipped", report.skipped, "yellow"),
                                  ("Failed", report.failed, "red")):
        if entries:
            listing = Table(title=title, show_edge=False, title_style=style)
            listing.add_column("document")
            listing.add_column("reason")
            for uri, reason in sorted(entries.items()):
                listing.add_row(uri, reason)
            out.print(listing)


@app.command()
def sync(path: Annotated[str, typer.Argument(help="A folder, a source id from headwater.toml, or a source URL "
                                                   "(s3://BUCKET[/PREFIX], git+URL[#BRANCH], https://HOST/PATH).")],
         collection: CollectionOpt = None, chroma_path: ChromaPathOpt = None, source_id: SourceIdOpt = None,
         include: IncludeOpt = None, exclude: ExcludeOpt = None,
         fleet: Annotated[bool, typer.Option("--fleet", help="Queue the sync for the worker fleet.")] = False,
         wait: Annotated[bool, typer.Option("--wait", help="With --fleet: wait for the run to finish.")] = False,
         allow_mass_delete: AllowMassDeleteOpt = False, allow_private_addresses: AllowPrivateAddressesOpt = False) -> None:
    """Sync a source once; exits 2 if some documents failed (the others are still indexed)."""
    from headwater.sync.embedded import open_engine

    web_options = {"allow_private_addresses": allow_private_addresses or None}
    if fleet:
        from headwater.cli.fleet import fleet_sync

        fleet_sync(path, collection, source_id, include, exclude, wait, allow_mass_delete, **web_options)
        return
    try:
        settings = cli_settings(collection, chroma_path)
        connector = resolve_connector(path, settings, source_id, include, exclude, **web_options)
        with _progress_bars() as bars, open_engine(settings, _RichProgress(bars)) as engine:
            report = engine.sync(connector, allow_mass_delete=allow_mass_delete)
            _consolidate_after_sync(engine, report)
        _record_cursor(settings, connector)
    except (HeadwaterError, ValueError) as exc:
        fail(exc)
    _print_report(report)
    raise typer.Exit(report.exit_code)


def _consolidate_after_sync(engine: Any, report: SyncReport) -> None:
    """With HEADWATER_CONSOLIDATE_AFTER_SYNC=true, a consolidation pass after a pass that wrote."""
    from headwater.consolidation.stage import after_embedded_pass

    done = after_embedded_pass(engine, report)
    if done is not None:
        _print_consolidated(done)


def _print_consolidated(done: Any) -> None:
    err.print(f"consolidated: {done.written} knowledge records written, {done.removed} removed")


app.command(name="consolidate")(cli_consolidate.consolidate)


def _record_cursor(settings: Any, connector: Any) -> None:
    """A source with a cursor (a git source's commit) keeps the one this pass synced, for the next push."""
    if isinstance(connector, HasCursor) and connector.cursor:
        from headwater.store.source_cursors import CursorStore

        CursorStore.from_settings(settings).set(connector.source_id, connector.cursor)


@app.command()
def watch(path: Annotated[str, typer.Argument(help="A folder, s3://BUCKET[/PREFIX], or a source id from headwater.toml.")],
          collection: CollectionOpt = None, chroma_path: ChromaPathOpt = None, source_id: SourceIdOpt = None,
          include: IncludeOpt = None, exclude: ExcludeOpt = None, queue_url: QueueUrlOpt = None,
          fleet: Annotated[bool, typer.Option("--fleet", help="Queue a full run, then forward each change to the fleet.")] = False) -> None:
    """Sync once, then keep the collection in sync with the source until interrupted (Ctrl-C).

    A folder is followed through file system events; an S3 source through its SQS queue of event
    notifications (--queue-url), each message deleted only once its changes are written.
    """
    from headwater.sync.embedded import open_engine

    if fleet:
        from headwater.cli.fleet import fleet_watch

        fleet_watch(path, collection, source_id, include, exclude, queue_url)
        return
    try:
        settings = cli_settings(collection, chroma_path)
        connector = resolve_connector(path, settings, source_id, include, exclude, queue_url=queue_url)
        with open_engine(settings) as engine:
            report = engine.sync(connector)
            _print_report(report)
            _consolidate_after_sync(engine, report)
            _watch_loop(engine, connector, settings)
    except (HeadwaterError, ValueError) as exc:
        fail(exc)


def _watch_loop(engine: Any, connector: Any, settings: Any) -> None:
    from headwater.sync.watching import run_acknowledged_watch, run_watch

    err.print(f"watching {connector.root} (Ctrl-C to stop)")
    on_error = lambda exc: err.print(f"[yellow]not synced:[/yellow] {exc}")  # noqa: E731
    if isinstance(connector, AcknowledgedEvents):
        from headwater.sync.dead_letters import FileDeadLetters, dead_letter_file

        letters = FileDeadLetters(dead_letter_file(settings.chroma_path), connector.source_id)
        run_acknowledged_watch(engine, connector, stop_on_signals(), on_report=_print_changes, on_error=on_error,
                               on_dead_letter=announce_dead_letter(letters), on_consolidated=_print_consolidated)
        print_event_counts(connector)
    else:
        run_watch(engine, connector, stop_on_signals(), on_report=_print_changes, on_error=on_error,
                  on_consolidated=_print_consolidated)
    err.print("stopped")


def _print_changes(report: SyncReport) -> None:
    parts = [f"{name} {count}" for name, count in (
        ("added", report.added), ("updated", report.updated), ("moved", report.moved),
        ("deleted", report.deleted), ("embedded chunks", report.chunks_embedded)) if count]
    parts += [f"failed {uri}: {reason}" for uri, reason in report.failed.items()]
    parts += [f"skipped {uri}: {reason}" for uri, reason in report.skipped.items()]
    parts += [f"warning {uri}: {warning}" for uri, warning in report.warnings.items()]
    if parts:
        out.print("synced: " + ", ".join(parts))


@app.command()
def query(text: Annotated[str, typer.Argument(help="What to search for.")],
          collection: CollectionOpt = None, chroma_path: ChromaPathOpt = None,
          k: Annotated[int, typer.Option("-k", metavar="N", min=1, max=1000, help="Results to return.")] = 5,
          mode: Annotated[str, typer.Option("--mode", metavar="MODE", help="auto (default: hybrid for a collection of "
                                            "mostly code, dense for prose), hybrid, dense or sparse.")] = "auto",
          source: Annotated[Optional[str], typer.Option("--source", metavar="SOURCE_ID", help="Only this source id.")] = None,
          uri_prefix: Annotated[Optional[str], typer.Option("--uri-prefix", metavar="PREFIX", help="Only under this path.")] = None,
          where: Annotated[Optional[str], typer.Option("--where", metavar="JSON", help="A Chroma where filter, as JSON.")] = None,
          as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
          per_chunk: Annotated[bool, typer.Option("--per-chunk", help="The k best chunks, not the k best documents.")] = False,
          knowledge: Annotated[bool, typer.Option("--knowledge", help="Search the consolidated knowledge collection (dense).")] = False) -> None:
    """Search the synced collection: the k best documents, in the collection's default mode unless --mode says otherwise."""
    from headwater.retrieval.searcher import Filters, open_searcher

    if knowledge:
        from headwater.cli.consolidate import print_knowledge_hits, search_knowledge

        try:
            found = search_knowledge(cli_settings(collection, chroma_path), text, k)
        except (HeadwaterError, ValueError) as exc:
            fail(exc)
        print_knowledge_hits(found, as_json)
        return
    try:
        if mode not in ("auto", "hybrid", "dense", "sparse"):
            raise ValueError(f"--mode must be auto, hybrid, dense or sparse, not {mode!r}")
        filters = Filters(source, uri_prefix, _where(where))
        searcher = open_searcher(cli_settings(collection, chroma_path), mode, one_off=True)  # type: ignore[arg-type]
        hits = searcher.search(text, k=k, mode=mode, filters=filters,  # type: ignore[arg-type]
                               group_by="chunk" if per_chunk else "document")
    except (HeadwaterError, ValueError) as exc:
        fail(exc)
    if as_json:
        print(json.dumps([h.to_json() for h in hits], indent=2))
        return
    if mode == "auto":  # on stderr, so piped results stay results: which mode answered, and why
        chosen = searcher.default_mode()
        kind = "mostly source code" if chosen == "hybrid" else "mostly prose"
        err.print(f"mode auto: {chosen} (this collection is {kind}; --mode picks another)", style="dim")
    for rank, hit in enumerate(hits, 1):
        print_hit(rank, hit)


def print_hit(rank: int, hit: Any) -> None:
    """One result: its place and ranks, then the chunk's context header on its own dim line, then its text."""
    from rich.markup import escape

    from headwater.pipeline.chunk import split_header

    where_found = hit.uri + (f" p.{hit.metadata['page']}" if "page" in hit.metadata else "")
    sides = ", ".join(f"{name} #{r}" for name, r in (("dense", hit.dense_rank), ("sparse", hit.sparse_rank)) if r)
    more = getattr(hit, "matching_chunks", 1) - 1
    also = f"  +{more} more matching chunk{'s' if more > 1 else ''}" if more > 0 else ""
    out.print(f"[bold]{rank}. {escape(where_found)}[/bold]  score {hit.score:.4f}  ({sides}){also}")
    header, body = split_header(hit.text, hit.uri)
    if header:
        out.print("   [dim]› " + escape(textwrap.shorten(" ".join(header.split()), 200, placeholder=" …")) + "[/dim]")
    out.print("   " + escape(textwrap.shorten(" ".join(body.split()), 300, placeholder=" …")))


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
    from headwater.pipeline.stores import open_store

    try:
        settings = cli_settings(collection, chroma_path)
        summary = open_store(settings, create=False).source_summary()
    except (HeadwaterError, ValueError) as exc:
        fail(exc)
    cursors = _cursors(settings)
    for source, counts in summary.items():
        if source in cursors:  # a git source: the commit it synced, and why it stopped following if it did
            counts.update({"cursor": cursors[source].cursor, "note": cursors[source].note})
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    table = Table(title=f"Collection {settings.collection}", show_edge=False)
    for column in ("source", "documents", "chunks", *(("cursor",) if cursors else ())):
        table.add_column(column, justify="left" if column in ("source", "cursor") else "right")
    for source, counts in summary.items():
        cursor = (counts.get("cursor") or "")[:12] + (f" ({counts['note']})" if counts.get("note") else "")
        table.add_row(source, str(counts["documents"]), str(counts["chunks"]), *((cursor,) if cursors else ()))
    out.print(table)


def _cursors(settings: Any) -> dict:
    """Sources' cursors from the source database, when there is one (status never creates it)."""
    if settings.database_url is None and not (settings.chroma_path.resolve().parent / "headwater.sqlite3").exists():
        return {}
    from headwater.store.source_cursors import CursorStore

    from sqlalchemy.exc import SQLAlchemyError

    try:
        return CursorStore.from_settings(settings).all()
    except SQLAlchemyError as exc:  # a database that cannot be reached must not hide the counts
        err.print(f"[yellow]sources' cursors unavailable: the source database did not answer ({type(exc).__name__})[/]")
        return {}


@app.command()
def reindex(collection: CollectionOpt = None, chroma_path: ChromaPathOpt = None) -> None:
    """Rebuild the derived sparse index from the collection alone (it is a cache; this is always safe)."""
    import time

    from headwater.pipeline.stores import open_store
    from headwater.retrieval.sparse_index_files import sparse_index_dir
    from headwater.store.path_lock import ChromaPathLock
    from headwater.retrieval.sparse_index import SparseIndex

    try:
        settings = cli_settings(collection, chroma_path)
        directory = sparse_index_dir(settings)
        if directory is None:
            raise ValueError("only an embedded Chroma keeps a sparse index on disk; servers rebuild it in memory")
        with ChromaPathLock(settings.chroma_path):
            started = time.perf_counter()
            store = open_store(settings, create=False)
            index = SparseIndex.rebuild(store.collection, directory)
            index.persist()
    except (HeadwaterError, ValueError) as exc:
        fail(exc)
    out.print(f"rebuilt the sparse index of {len(index)} chunks in {time.perf_counter() - started:.1f}s "
              f"({index.nbytes() / 1048576:.1f} MB)")


def _endpoint_check(settings: Any) -> dict[str, str]:
    """The configured embedding service answers, with the identity a collection would record."""
    if not settings.dense_from_endpoint:
        return {}
    from headwater.pipeline.dense_source import dense_model_identity

    return {"embedding service": f"{settings.dense_endpoint_url}: {dense_model_identity(settings)}"}


@app.command()
def doctor() -> None:
    """Check that the models, every format's parser and the code grammars load offline; makes the SPLADE ONNX
    export if there is none yet."""
    from headwater.pipeline.embed_dense import DenseEmbedder, install_packaged_model
    from headwater.pipeline.embed_sparse import SpladeEncoder, onnx_export
    from headwater.pipeline.parser_check import check_parsers

    try:
        settings = load_settings()
        dense = DenseEmbedder(settings.dense_model_dir, int8=settings.dense_int8, cache_dir=settings.onnx_cache_dir)
        # Making the export is this command's job: it is reported below, not warned about as on first use.
        onnx_export(settings.sparse_model_dir, settings.onnx_cache_dir, announce=False)
        sparse = SpladeEncoder(settings.sparse_model_dir, cache_dir=settings.onnx_cache_dir)
        formats, grammars = check_parsers()
        checks = {
            "dense model": f"{dense.name}, {dense.embed(['headwater']).shape[1]} dimensions ({dense.model_file})",
            **_endpoint_check(settings),
            "sparse model": f"{sparse.name}, {len(sparse.encode(['headwater'])[0][0])} active terms "
                            f"(onnxruntime, {sparse.onnx_file})",
            "parsers": f"a sample of each format parsed: {', '.join(formats)}",
            "code grammars": ", ".join(grammars),
        }
        if not settings.dense_model_dir:  # so Chroma's own default embedding function runs offline as well
            checks["Chroma's default model"] = f"the packaged files, linked into {install_packaged_model()}"
        if llm := _in_process_llm_check():
            checks["in-process LLM"] = llm
    except (HeadwaterError, ValueError, ImportError) as exc:
        fail(exc)
    for name, detail in checks.items():
        # soft_wrap: piped output (80 columns for rich) must not break a file path across lines.
        out.print(f"[green]ok[/green] {name}: {detail}", soft_wrap=True)


LLM_CHECK = ("import sys; from llama_cpp import Llama; "
             "Llama(model_path=sys.argv[1], n_ctx=256, verbose=False, seed=0).create_completion('Hi', max_tokens=1)")


def _in_process_llm_check() -> str | None:
    """One token from llama.cpp and the packaged GGUF, where both are installed, in a child process.

    A llama.cpp built for CPU features this machine does not grant (AMX under a hypervisor) dies
    with SIGSEGV on its first completion: it must fail the install, saying what to do, not kill a
    consolidation pass later.
    """
    import importlib.util
    import subprocess
    import sys

    from headwater.consolidation.llm import packaged_gguf

    model = packaged_gguf() if importlib.util.find_spec("llama_cpp") else None
    if model is None:
        return None
    done = subprocess.run([sys.executable, "-c", LLM_CHECK, str(model)], capture_output=True, timeout=300)
    if done.returncode != 0:
        raise ConfigurationError(
            f"llama-cpp-python exited with {done.returncode} computing one token of {model.name}; a build "
            "for CPU instructions this machine does not allow does that: run `pip cache remove "
            "llama_cpp_python`, then scripts/install.sh --test (it builds a portable AVX2 llama.cpp unless "
            "CMAKE_ARGS says otherwise)")
    return f"llama.cpp computed a token of {model.name}"


@app.command()
def serve(host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
          port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port to listen on.")] = 8080,
          collection: CollectionOpt = None, chroma_path: ChromaPathOpt = None) -> None:
    """Run the HTTP app: REST API (/api/v1, /docs), admin dashboard (/admin), schedules; fleet or embedded by configuration."""
    import uvicorn

    from headwater.http.app import create_app, open_services

    from headwater.observability import logs, setup

    settings = cli_settings(collection, chroma_path)
    setup(settings, "serve")
    try:
        services = open_services(settings)  # fails here, with the reason, before listening
    except (HeadwaterError, ValueError) as exc:
        fail(exc)
    mode = services.backend.mode
    err.print(f"headwater serve: {mode} mode, collection {settings.collection}, http://{host}:{port}/admin")
    try:
        uvicorn.run(create_app(settings, services), host=host, port=port, log_level="info",
                    log_config=logs.uvicorn_log_config(settings), proxy_headers=True, server_header=False)
    finally:
        services.stats.close()
        services.backend.close()


# Fleet commands (worker, beat, runs, retry, cancel) live in their own module.
for _command in cli_fleet.COMMANDS:
    app.command()(_command)
# Promotion of an embedded collection to a server (push).
for _command in cli_push.COMMANDS:
    app.command()(_command)


def main() -> None:  # pragma: no cover
    logging.basicConfig(level=logging.WARNING)
    app()


"""The fleet's commands: worker, beat, runs, retry, cancel, and `sync --fleet` / `watch --fleet`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from connectors.base import AcknowledgedEvents, FollowsHead, HasCursor
from headwater import exit_codes
from headwater.cli.common import announce_dead_letter, print_event_counts, resolve_connector, fail, cli_settings, err, out, stop_on_signals
from headwater.errors import HeadwaterError
from headwater.settings import load_settings

RunArg = Annotated[str, typer.Argument(help="A run id (or a unique prefix of one, as `headwater runs` shows).")]


def _queue_full_run(path: str, collection: str | None, source_id: str | None, include: list[str] | None,
                    exclude: list[str] | None, allow_mass_delete: bool, trigger: str = "manual",
                    **event_options: Any) -> tuple[Any, Any, dict, Any, str]:
    from workers.sending import fleet_client
    from headwater.fleet.context import local_target
    from headwater.fleet.enqueue import enqueue_sync

    settings = cli_settings(collection)
    # A declared source may set the collection.
    connector = resolve_connector(path, settings, source_id, include, exclude, **event_options)
    fleet = fleet_client(settings)
    target = local_target(settings)
    if isinstance(connector, FollowsHead):  # a git source: the run reads the branch's newest commit
        connector = connector.pinned_to_head()
    spec = connector.spec()
    run_id = enqueue_sync(fleet, spec, target, allow_mass_delete=allow_mass_delete, trigger=trigger)
    if isinstance(connector, HasCursor) and connector.cursor:
        from headwater.store.source_cursors import CursorStore

        CursorStore.from_settings(settings).set(connector.source_id, connector.cursor)
    return fleet, connector, spec, target, run_id


def fleet_sync(path: str, collection: str | None, source_id: str | None, include: list[str] | None,
               exclude: list[str] | None, wait: bool, allow_mass_delete: bool, **options: Any) -> None:
    """Queue a full run; with --wait, follow it and exit 0 (complete), 2 (some documents failed) or 1."""
    try:
        fleet, _, _, _, run_id = _queue_full_run(path, collection, source_id, include, exclude, allow_mass_delete,
                                                 **options)
    except (HeadwaterError, ValueError) as exc:
        fail(exc)
    out.print(f"queued run {run_id}")
    if not wait:
        return
    while not (run := fleet.runs.get(run_id)).status.finished:
        time.sleep(0.5)
    _print_runs([run])
    _print_errors(run)
    raise typer.Exit(exit_codes.OK if run.status.value == "complete" else exit_codes.SOME_FAILED
                     if run.status.value == "complete_with_errors" else exit_codes.ERROR)


def fleet_watch(path: str, collection: str | None, source_id: str | None, include: list[str] | None,
                exclude: list[str] | None, queue_url: str | None = None) -> None:
    """Queue a full run, then forward each change to the fleet as a live change (this process only enqueues)."""
    from headwater.fleet.enqueue import enqueue_changes, enqueue_sync
    from headwater.models import Trigger

    try:
        fleet, connector, spec, target, run_id = _queue_full_run(path, collection, source_id, include, exclude, False,
                                                                 trigger=Trigger.WATCH,
                                                                 queue_url=queue_url)
    except (HeadwaterError, ValueError) as exc:
        fail(exc)
    out.print(f"queued run {run_id}")

    def forward(changes: list | None) -> None:
        # Returns once the run is in Redis: only then may an acknowledged source forget the events.
        queued = (enqueue_sync(fleet, spec, target, trigger=Trigger.WATCH) if changes is None
                  else enqueue_changes(fleet, spec, target, changes, Trigger.WATCH))
        if queued:
            what = "a full run" if changes is None else f"{len(changes)} changes"
            out.print(f"queued run {queued} ({what})")

    err.print(f"watching {connector.root} for the fleet (Ctrl-C to stop)")
    try:
        if isinstance(connector, AcknowledgedEvents):
            from headwater.sync.dead_letters import RedisDeadLetters

            connector.watch(forward, stop_on_signals(),
                            on_dead_letter=announce_dead_letter(RedisDeadLetters(fleet.redis, connector.source_id)))
            print_event_counts(connector)
        else:
            connector.watch(forward, stop_on_signals())
    except (HeadwaterError, ValueError) as exc:
        fail(exc)
    err.print("stopped")


def worker(queues: Annotated[Optional[str], typer.Option("--queues", help="Comma-separated queues (default: all).")] = None,
           concurrency: Annotated[int, typer.Option("--concurrency", "-c", metavar="N", min=1,
                                                    help="Processes (threads with --pool threads).")] = 1,
           pool: Annotated[str, typer.Option("--pool", "-P", metavar="POOL", help="prefork (CPU work: one process per task) "
                                             "or threads (I/O-bound work: the embed.dense pool with an embedding endpoint).")] = "prefork",
           name: Annotated[Optional[str], typer.Option(
               "--name", metavar="NAME", help="This worker's name, unique in the fleet (default: headwater-PID@HOST).")] = None
           ) -> None:
    """Run a fleet worker: pulls work from Redis, writes to the Chroma server. Needs no inbound port
    (HEADWATER_METRICS_PORT opens one for Prometheus)."""
    from headwater import queues as names
    from workers.start import run_worker

    settings = load_settings()
    if not settings.is_remote:
        fail(ValueError("workers need a Chroma server: set HEADWATER_CHROMA_HOST (and HEADWATER_CHROMA_PORT)"))
    try:
        run_worker(settings, queues.split(",") if queues else list(names.ALL_QUEUES), concurrency, name, pool)
    except ValueError as exc:
        fail(exc)


def beat(schedule_file: Annotated[Path, typer.Option(
        "--schedule-file", metavar="PATH", help="Where Celery beat keeps its last-run times.")] = Path(".headwater/celerybeat-schedule")) -> None:
    """Run the fleet's scheduler (Celery beat on redbeat): the sweeper and per-source schedules. Run exactly one."""
    from schedules.beat import run_beat

    run_beat(load_settings(), schedule_file)


def runs(run_id: Annotated[Optional[str], typer.Argument(help="Show this run (id or unique prefix).")] = None,
         as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
         errors: Annotated[bool, typer.Option("--errors", help="List the run's failed documents with reasons.")] = False,
         source: Annotated[Optional[str], typer.Option("--source", metavar="SOURCE_ID", help="Only runs of this source.")] = None,
         limit: Annotated[int, typer.Option("--limit", metavar="N", min=1, help="How many, newest first.")] = 20) -> None:
    """Fleet runs, newest first, with status and counters; one run's failed documents with --errors."""
    from headwater.redis_connection import redis_client
    from headwater.fleet.runs import RunStore

    store = RunStore(redis_client(load_settings()))
    try:
        listed = [_find_run(store, run_id)] if run_id else store.list(limit, source)
    except (LookupError, ValueError) as exc:
        fail(exc)
    if errors:
        failed = [{"run": r.id, "uri": uri, "reason": reason} for r in listed for uri, reason in r.errors.items()]
        if as_json:
            print(json.dumps(failed, indent=2))
        else:
            for run in listed:
                _print_errors(run)
        return
    if as_json:
        print(json.dumps([r.to_json() for r in listed], indent=2))
        return
    _print_runs(listed)


def retry(run_id: RunArg) -> None:
    """Queue a new run of a finished run's failed documents (or of the whole source, if the run itself failed)."""
    from workers.sending import fleet_client
    from headwater.fleet.enqueue import retry_run

    try:
        fleet = fleet_client(load_settings())
        new_run = retry_run(fleet, _find_run(fleet.runs, run_id).id)
    except (HeadwaterError, LookupError, ValueError) as exc:
        fail(exc)
    out.print(f"queued run {new_run}")


def cancel(run_id: RunArg) -> None:
    """Cancel an unfinished fleet run: its queued documents are dropped, written ones stay."""
    from headwater.redis_connection import redis_client
    from headwater.fleet.runs import RunStore

    store = RunStore(redis_client(load_settings()))
    try:
        run = _find_run(store, run_id)
    except (LookupError, ValueError) as exc:
        fail(exc)
    if not store.cancel(run.id):
        fail(ValueError(f"run {run.id} has already finished ({run.status.value})"))
    out.print(f"cancelled run {run.id}")


def _find_run(store: Any, run_id: str) -> Any:
    run = store.get(run_id)
    if run is not None:
        return run
    matches = [r for r in store.list(1000) if r.id.startswith(run_id)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ValueError(f"{run_id} matches {len(matches)} runs; give more of the id")
    raise LookupError(f"no run {run_id} (see `headwater runs`)")


def _print_runs(listed: list) -> None:
    from headwater.fleet.runs import COUNTERS

    table = Table(show_edge=False)
    for column in ("run", "source", "kind", "status", *COUNTERS):
        table.add_column(column)
    for run in listed:
        row = run.to_json()
        table.add_row(run.id[:12], run.source_id, run.kind, row["status"], *(str(row[c]) for c in COUNTERS))
    out.print(table)


def _print_errors(run: Any) -> None:
    for uri, warning in sorted(run.warnings.items()):
        out.print(f"[yellow]{run.id[:12]} {uri}[/yellow]: warning: {warning}")
    for uri, reason in sorted(run.errors.items()):
        out.print(f"[red]{run.id[:12]} {uri}[/red]: {reason}")
    if run.errors:
        out.print(f"retry the failed documents with `headwater retry {run.id[:12]}`")


COMMANDS = (worker, beat, runs, retry, cancel)

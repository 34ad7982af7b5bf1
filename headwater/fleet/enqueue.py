"""Ways into the fleet: a full run of a source, live changes of single documents, a retry of failures."""

from __future__ import annotations

import time
from typing import Any

from headwater.fleet.context import Fleet
from headwater.fleet.runs import Target
from headwater.models import DocumentChange, Op, Trigger
from headwater import queues as names


def _create(fleet: Fleet, spec: dict[str, Any], target: Target, kind: str, **options: Any) -> str:
    run = fleet.runs.create(spec["id"], spec, target, kind=kind, window=fleet.settings.run_window,
                            list_deadline=time.time() + fleet.settings.redrive_after_seconds, **options)
    fleet.send(names.LIST_SOURCE, [run.id])
    return run.id


def enqueue_sync(fleet: Fleet, spec: dict[str, Any], target: Target, *, allow_mass_delete: bool = False,
                 trigger: Trigger = Trigger.MANUAL) -> str:
    """A full run: list the source, change what differs, delete what is gone. Returns the run id."""
    return _create(fleet, spec, target, "full", allow_mass_delete=allow_mass_delete, trigger=trigger)


def enqueue_changes(fleet: Fleet, spec: dict[str, Any], target: Target, changes: list[DocumentChange],
                    trigger: Trigger = Trigger.S3_EVENT) -> str | None:
    """Live changes (one uri upserted or deleted each), without a listing.

    A change is accepted only if it is newer (by its order key) than every change of its uri
    accepted before: a duplicate is dropped here, an older version can never overwrite a newer
    one, and a delete overtaken by a later upsert loses when its write comes (the write checks
    again). Returns the run id, or None when every change was a duplicate or stale.
    """
    accepted = [c for c in newest_per_uri(changes) if fleet.runs.accept_live(spec["id"], c)]
    if not accepted:
        return None
    return _create(fleet, spec, target, "live", changes=accepted, trigger=trigger)


def newest_per_uri(changes: list[DocumentChange]) -> list[DocumentChange]:
    """One change per uri: the newest by order key within an order space; where a uri has changes in
    two spaces (which cannot be compared), the one given later stands for it."""
    latest: dict[str, DocumentChange] = {}
    for change in changes:
        held = latest.get(change.uri)
        if held is None or held.order_space != change.order_space or change.order_key >= held.order_key:
            latest[change.uri] = change
    return list(latest.values())


def retry_run(fleet: Fleet, run_id: str) -> str:
    """A new run of the failed documents of `run_id` (or a new full run when the run itself failed)."""
    run = fleet.runs.get(run_id)
    if run is None:
        raise LookupError(f"run {run_id} does not exist (or its history was trimmed)")
    if not run.status.finished:
        raise ValueError(f"run {run_id} is still {run.status.value}; retry it once it has finished")
    spec = fleet.runs.spec(run_id)
    if "(source)" in run.errors or run.kind == "full" and run.status.value == "failed":
        return enqueue_sync(fleet, spec, run.target, allow_mass_delete=run.allow_mass_delete, trigger=Trigger.RETRY)
    failed = [uri for uri in run.errors if uri != "(source)"]
    if not failed:
        raise ValueError(f"run {run_id} has no failed documents to retry")
    changes = [DocumentChange(run.source_id, uri, Op.UPSERT) for uri in failed]
    return _create(fleet, spec, run.target, "retry", changes=changes, trigger=Trigger.RETRY)

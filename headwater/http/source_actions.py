"""The dashboard's source actions: add, edit, sync now, retry failed, pause and resume the schedule, and
delete (after a page that says what happens to the source's chunks). Each is a CSRF-checked form post
that answers 303 with a flash (headwater.http.flash): a reload never posts again, and a refusal lands
on a 4xx page saying what was wrong and that nothing was changed. The same calls as the REST API:
the backends (embedded or fleet) do the work, so both modes behave alike.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, Response

from headwater.http import admin
from headwater.http.flash import redirect

router = APIRouter(prefix="/admin", include_in_schema=False)


async def _typed_form(request: Request) -> dict[str, str]:
    return {name: value for name, value in (await request.form()).items() if isinstance(value, str)}


def _source(request: Request, session: dict[str, Any], svc: Any, source_id: str) -> tuple[Any, Response | None]:
    """The source, or the redirect that says it is gone."""
    source = svc.catalog.get(source_id)
    if source is None:
        return None, redirect(request, session, "/admin", f"There is no source {source_id} (was it deleted?).",
                              status=404)
    return source, None


def _declared(request: Request, session: dict[str, Any], svc: Any, source: Any) -> Response:
    return redirect(request, session, f"/admin/sources/{source.id}",
                    f"{source.id} is declared in {svc.settings.config_file}; change it there.", status=409)


@router.post("/sources")
async def add_source(request: Request) -> Response:
    """Add a source of any kind and start its first sync; a refused form comes back (422) with the message
    the API gives for the same mistake, and nothing stored."""
    from connectors import InvalidSource, registered_kinds
    from headwater.http.source_forms import source_from_form
    from headwater.http.sources import parse_stored_source

    typed = await _typed_form(request)
    session, svc = admin._form_post(request, typed.get("csrf", ""))
    kind = typed.get("kind") or "folder"
    shown = kind if kind in registered_kinds() else "folder"
    kept = {k: v for k, v in typed.items() if k != "csrf"}
    try:
        config = parse_stored_source(source_from_form(typed, kind), svc.settings)
    except InvalidSource as exc:
        return redirect(request, session, f"/admin/sources/new?kind={shown}", str(exc), status=422, form=kept)
    if svc.catalog.get(config.id) is not None:
        return redirect(request, session, f"/admin/sources/new?kind={shown}",
                        f"id: source {config.id} already exists; choose another id.", status=409, form=kept)
    svc.store.create_source(config, {})
    source = svc.catalog.get(config.id)
    svc.backend.schedule_changed(source)
    run_id, busy = svc.backend.trigger(source)
    return redirect(request, session, f"/admin/runs/{run_id or busy}", f"Added {config.id}; its first sync is running.")


@router.post("/sources/{source_id}")
async def edit_source(request: Request, source_id: str) -> Response:
    """Replace a stored source's configuration (its kind stays); refused as the API refuses it."""
    from connectors import InvalidSource
    from headwater.http.source_forms import source_from_form
    from headwater.http.sources import parse_stored_source

    typed = await _typed_form(request)
    session, svc = admin._form_post(request, typed.get("csrf", ""))
    source, gone = _source(request, session, svc, source_id)
    if gone:
        return gone
    if source.read_only:
        return _declared(request, session, svc, source)
    try:
        config = parse_stored_source(source_from_form(typed, source.config.kind), svc.settings, source_id)
    except InvalidSource as exc:
        return redirect(request, session, f"/admin/sources/{source_id}", str(exc), status=422,
                        form={k: v for k, v in typed.items() if k != "csrf"})
    svc.store.update_source(config, None)
    svc.backend.schedule_changed(svc.catalog.get(source_id))
    return redirect(request, session, f"/admin/sources/{source_id}", f"Saved {source_id}.")


@router.post("/sources/{source_id}/sync")
def sync_source(request: Request, source_id: str, csrf: str = Form("")) -> Response:
    session, svc = admin._form_post(request, csrf)
    source, gone = _source(request, session, svc, source_id)
    if gone:
        return gone
    try:
        run_id, busy = svc.backend.trigger(source)
    except ValueError as exc:
        return redirect(request, session, f"/admin/sources/{source_id}", f"{source_id} was not synced: {exc}",
                        status=409)
    if run_id is None:
        return redirect(request, session, f"/admin/runs/{busy}", f"{source_id} already has a run in progress.")
    return redirect(request, session, f"/admin/runs/{run_id}", f"Syncing {source_id}.")


@router.post("/sources/{source_id}/retry")
def retry_failed(request: Request, source_id: str, csrf: str = Form("")) -> Response:
    """Retry the failed documents of the source's latest finished run."""
    session, svc = admin._form_post(request, csrf)
    source, gone = _source(request, session, svc, source_id)
    if gone:
        return gone
    latest = next((r for r in svc.backend.list_runs(50, source_id) if r["finished"]), None)
    if latest is None or not latest["errors"]:
        return redirect(request, session, f"/admin/sources/{source_id}",
                        f"{source_id} has no failed documents to retry.", status=409)
    return retry_run_redirect(request, session, svc, latest["id"], f"/admin/sources/{source_id}")


def retry_run_redirect(request: Request, session: dict[str, Any], svc: Any, run_id: str, back: str) -> Response:
    """Queue a retry of a finished run's failed documents and go to it (or back, saying why not)."""
    try:
        new_run, busy = svc.backend.retry(run_id)
    except LookupError as exc:
        return redirect(request, session, back, str(exc), status=404)
    except ValueError as exc:
        return redirect(request, session, back, str(exc), status=409)
    if new_run is None:
        return redirect(request, session, f"/admin/runs/{busy}", "This source already has a run in progress.")
    return redirect(request, session, f"/admin/runs/{new_run}", "Retrying the failed documents.")


@router.post("/sources/{source_id}/schedule/{action}")
def pause_or_resume(request: Request, source_id: str, action: str, csrf: str = Form("")) -> Response:
    """Pause the schedule (manual syncs still run) or resume it (a new period starts now)."""
    session, svc = admin._form_post(request, csrf)
    source, gone = _source(request, session, svc, source_id)
    if gone:
        return gone
    back = f"/admin/sources/{source_id}"
    paused = source_id in svc.store.paused_schedules()
    if action == "pause":
        if not (source.config.schedule_interval_seconds or source.config.schedule_cron):
            return redirect(request, session, back, f"{source_id} has no schedule to pause.", status=409)
        if paused:
            return redirect(request, session, back, f"The schedule of {source_id} was already paused.")
        svc.store.pause_schedule(source_id)
        message = f"Paused the schedule of {source_id}; Sync now still works."
    elif action == "resume":
        if not paused:
            return redirect(request, session, back, f"The schedule of {source_id} was not paused.")
        svc.store.resume_schedule(source_id)
        message = f"Resumed the schedule of {source_id}; its next period starts now."
    else:
        return redirect(request, session, back, "Choose pause or resume.", status=404)
    svc.backend.schedule_changed(source)
    return redirect(request, session, back, message)


@router.get("/sources/{source_id}/delete", response_class=HTMLResponse)
def confirm_delete(request: Request, source_id: str) -> Response:
    """What deleting does to the source's chunks, and the choice: keep them or delete them."""
    from headwater.http.source_view import deletion_context

    session = admin._session(request)
    svc = admin._svc(request)
    source = svc.catalog.get(source_id)
    if source is None:
        raise HTTPException(404, f"There is no source {source_id}.")
    if source.read_only:
        raise HTTPException(409, f"{source_id} is declared in {svc.settings.config_file}; remove it there.")
    return admin._render(request, "delete_source.html", session, source=source, **deletion_context(svc, source))


@router.post("/sources/{source_id}/delete")
def delete_source(request: Request, source_id: str, csrf: str = Form(""), documents: str = Form("")) -> Response:
    """Delete the source; its chunks stay (documents=keep) or a run removes them (documents=delete)."""
    session, svc = admin._form_post(request, csrf)
    source, gone = _source(request, session, svc, source_id)
    if gone:
        return gone
    if source.read_only:
        return _declared(request, session, svc, source)
    if documents not in ("keep", "delete"):
        return redirect(request, session, f"/admin/sources/{source_id}/delete",
                        "Choose whether the source's chunks are kept or deleted.", status=422)
    # Queued before the source goes: the run carries the source's configuration, not a reference to it.
    run_id = svc.backend.purge(source) if documents == "delete" else None
    svc.store.delete_source(source_id)
    svc.backend.schedule_removed(source_id)
    if run_id:
        return redirect(request, session, f"/admin/runs/{run_id}",
                        f"Deleted {source_id}; this run removes its chunks from the collection.")
    if documents == "delete":
        return redirect(request, session, "/admin", f"Deleted {source_id}; it had no chunks in the collection.")
    return redirect(request, session, "/admin",
                    f"Deleted {source_id}; its chunks stay in the collection and stay searchable.")

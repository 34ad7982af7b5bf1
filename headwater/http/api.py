"""REST API under /api/v1: sources, runs, documents, failed documents, search. Every route needs the admin token."""

from __future__ import annotations

import json
from typing import Any, Literal

from fastapi import APIRouter, Body, Depends, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse

from connectors import InvalidSource
from headwater.errors import ConfigurationError
from headwater.http.sources import parse_stored_source

router = APIRouter(prefix="/api/v1", tags=["api"])


def services(request: Request) -> Any:
    return request.app.state.services


def authenticated(request: Request) -> None:
    services(request).auth.require_token(request)


secured = APIRouter(dependencies=[Depends(authenticated)])


def _source_or_404(svc: Any, source_id: str) -> Any:
    source = svc.catalog.get(source_id)
    if source is None:
        raise HTTPException(404, f"no source {source_id}")
    return source


def _source_view(svc: Any, source: Any) -> dict[str, Any]:
    view = source.to_json()
    runs = svc.backend.list_runs(1, source.id)
    view["last_run"] = runs[0] if runs else None
    view["schedule_paused_at"] = svc.store.paused_schedules().get(source.id)
    view["next_run_at"] = None if view["schedule_paused_at"] else svc.backend.next_run_at(source.id)
    counts = svc.stats.source_summary().get(source.id, {})
    view["documents"], view["chunks"] = counts.get("documents", 0), counts.get("chunks", 0)
    return view


def _queued(run_id: str | None, busy: str | None) -> JSONResponse:
    if run_id is None:
        return JSONResponse({"detail": f"the source has an unfinished run ({busy}); wait for it or cancel it",
                             "busy_run": busy}, status_code=409)
    return JSONResponse({"run_id": run_id}, status_code=202)


# Sources ---------------------------------------------------------------------------------------


@secured.get("/sources", summary="Sources: declared in headwater.toml (read-only) and added through the API")
def list_sources(request: Request) -> list[dict[str, Any]]:
    svc = services(request)
    return [_source_view(svc, s) for s in svc.catalog.all()]


EXAMPLES = {
    "folder": {"summary": "A folder on the server", "value": {
        "id": "handbook", "kind": "folder", "options": {"path": "/srv/handbook", "include": ["**/*.md"]},
        "schedule_interval_seconds": 3600}},
    "s3": {"summary": "An S3 prefix (credentials: the server's AWS environment)", "value": {
        "id": "reports", "kind": "s3", "options": {"bucket": "acme-reports", "prefix": "2026/", "region": "eu-west-1"}}},
    "git": {"summary": "A branch of a private repository (the token named by an environment variable)", "value": {
        "id": "api-repo", "kind": "git", "options": {"url": "https://github.com/acme/api.git", "branch": "main",
                                                     "token_env": "GITHUB_TOKEN"}}},
    "web": {"summary": "A website, crawled", "value": {
        "id": "docs-site", "kind": "web", "options": {"start_urls": ["https://docs.example.com/"], "max_pages": 500},
        "schedule_cron": "0 3 * * *"}},
}
SOURCE_BODY = Body(description="A source: id, kind (folder, s3, git, web), the kind's options (see docs/sources.md), "
                               "and optionally collection and a schedule. Secrets are options naming an environment "
                               "variable (token_env), never values.", openapi_examples=EXAMPLES)


def invalid(exc: InvalidSource) -> JSONResponse:
    """422 naming each bad field, with the message every surface shows for it."""
    return JSONResponse({"detail": str(exc), "errors": [{"field": f, "message": m} for f, m in exc.problems]},
                        status_code=422)


@secured.post("/sources", status_code=201, summary="Add a source of any kind (stored durably; scheduled at once when it has a schedule)",
              responses={422: {"description": "An invalid source: `detail` names the field; nothing was stored"}})
def create_source(request: Request, body: dict[str, Any] = SOURCE_BODY) -> Any:
    svc = services(request)
    try:
        config = parse_stored_source(body, svc.settings)
    except InvalidSource as exc:
        return invalid(exc)
    if svc.catalog.get(config.id) is not None:
        raise HTTPException(409, f"source {config.id} already exists")
    from headwater.store.source_store import SourceExists

    try:
        svc.store.create_source(config, {})
    except SourceExists as exc:
        raise HTTPException(409, str(exc)) from None
    source = svc.catalog.get(config.id)
    svc.backend.schedule_changed(source)
    return JSONResponse(_source_view(svc, source), status_code=201)


@secured.get("/sources/{source_id}", summary="One source, with its last run, next scheduled run and counts")
def get_source(request: Request, source_id: str) -> dict[str, Any]:
    svc = services(request)
    return _source_view(svc, _source_or_404(svc, source_id))


@secured.put("/sources/{source_id}", summary="Replace a source's configuration (kind, options, collection, schedule)",
             responses={422: {"description": "An invalid source: `detail` names the field; nothing was changed"}})
def update_source(request: Request, source_id: str, body: dict[str, Any] = SOURCE_BODY) -> Any:
    svc = services(request)
    source = _source_or_404(svc, source_id)
    if source.read_only:
        raise HTTPException(409, f"source {source_id} is declared in {svc.settings.config_file}; edit that file")
    try:
        config = parse_stored_source(body, svc.settings, source_id)
    except InvalidSource as exc:
        return invalid(exc)
    svc.store.update_source(config, None)
    source = svc.catalog.get(source_id)
    svc.backend.schedule_changed(source)
    return _source_view(svc, source)


@secured.delete("/sources/{source_id}", status_code=204,
                summary="Remove a source; its indexed documents stay unless documents=delete, which queues their removal")
def delete_source(request: Request, source_id: str,
                  documents: Literal["keep", "delete"] = Query("keep", description=(
                      "keep: the source's chunks stay searchable (and are removed by nothing); delete: a run removes "
                      "them from the collection (X-Headwater-Run names it)"))) -> Response:
    svc = services(request)
    source = _source_or_404(svc, source_id)
    if source.read_only:
        raise HTTPException(409, f"source {source_id} is declared in {svc.settings.config_file}; edit that file")
    # Queued before the source goes: the run carries the source's configuration, not a reference to it.
    run_id = svc.backend.purge(source) if documents == "delete" else None
    svc.store.delete_source(source_id)
    svc.backend.schedule_removed(source_id)
    return Response(status_code=204, headers={"X-Headwater-Run": run_id} if run_id else None)


@secured.post("/sources/{source_id}/runs", status_code=202, summary="Trigger a full sync (409 while one is unfinished)")
def trigger(request: Request, source_id: str, allow_mass_delete: bool = False) -> JSONResponse:
    svc = services(request)
    source = _source_or_404(svc, source_id)
    try:
        return _queued(*svc.backend.trigger(source, allow_mass_delete=allow_mass_delete))
    except ValueError as exc:
        raise HTTPException(409, str(exc)) from None


@secured.post("/sources/{source_id}/schedule/{action}",
              summary="Pause the source's schedule (manual syncs still run), or resume it (a new period starts now)")
def pause_or_resume_schedule(request: Request, source_id: str, action: Literal["pause", "resume"]) -> dict[str, Any]:
    svc = services(request)
    source = _source_or_404(svc, source_id)
    (svc.store.pause_schedule if action == "pause" else svc.store.resume_schedule)(source_id)
    svc.backend.schedule_changed(source)
    return _source_view(svc, source)


@secured.get("/sources/{source_id}/documents", summary="Documents of a source in the collection, by uri")
def documents(request: Request, source_id: str, limit: int = Query(100, ge=1, le=1000),
              offset: int = Query(0, ge=0, le=10_000_000)) -> dict[str, Any]:
    svc = services(request)
    source = _source_or_404(svc, source_id)
    try:
        stored = svc.backend.store_for(source.config.collection).documents(source_id)
    except ConfigurationError:
        stored = {}
    uris = sorted(stored)
    page = [{"uri": uri, "chunks": len(stored[uri].ids), "version": stored[uri].doc_version,
             "hash": stored[uri].doc_hash} for uri in uris[offset:offset + limit]]
    return {"total": len(uris), "offset": offset, "documents": page}


def _latest_finished(svc: Any, source_id: str) -> dict[str, Any] | None:
    return next((r for r in svc.backend.list_runs(50, source_id) if r["finished"]), None)


@secured.get("/sources/{source_id}/failed", summary="Failed documents of the source's latest finished run, with reasons")
def failed_documents(request: Request, source_id: str) -> dict[str, Any]:
    svc = services(request)
    _source_or_404(svc, source_id)
    run = _latest_finished(svc, source_id)
    return {"run_id": run["id"] if run else None, "documents": run["failed_documents"] if run else []}


@secured.post("/sources/{source_id}/failed/retry", status_code=202, summary="Retry the failed documents of the latest finished run")
def retry_failed(request: Request, source_id: str) -> JSONResponse:
    svc = services(request)
    _source_or_404(svc, source_id)
    run = _latest_finished(svc, source_id)
    if run is None or not run["errors"]:
        raise HTTPException(409, f"source {source_id} has no failed documents to retry")
    return _retry(svc, run["id"])


# Runs ------------------------------------------------------------------------------------------


@secured.get("/runs", summary="Runs, newest first, with counters, progress and per-document errors")
def list_runs(request: Request, source_id: str | None = None, limit: int = Query(50, ge=1, le=500)) -> list[dict[str, Any]]:
    return services(request).backend.list_runs(limit, source_id)


@secured.get("/runs/{run_id}", summary="One run")
def get_run(request: Request, run_id: str) -> dict[str, Any]:
    run = services(request).backend.get_run(run_id)
    if run is None:
        raise HTTPException(404, f"no run {run_id}")
    return run


@secured.post("/runs/{run_id}/cancel", summary="Cancel an unfinished run (written documents stay)")
def cancel_run(request: Request, run_id: str) -> dict[str, Any]:
    svc = services(request)
    outcome = svc.backend.cancel(run_id)
    if outcome is None:
        raise HTTPException(404, f"no run {run_id}")
    if not outcome:
        raise HTTPException(409, f"run {run_id} has already finished")
    return svc.backend.get_run(run_id)


@secured.post("/runs/{run_id}/retry", status_code=202, summary="Queue a run of a finished run's failed documents")
def retry_run(request: Request, run_id: str) -> JSONResponse:
    return _retry(services(request), run_id)


def _retry(svc: Any, run_id: str) -> JSONResponse:
    try:
        return _queued(*svc.backend.retry(run_id))
    except LookupError as exc:
        raise HTTPException(404, str(exc)) from None
    except ValueError as exc:
        raise HTTPException(409, str(exc)) from None


# Search and status -----------------------------------------------------------------------------


@secured.get("/search", summary="Search (auto: hybrid on code, dense on prose): the same results as `headwater query`")
def search(request: Request, q: str = Query(min_length=1, max_length=2000), k: int = Query(5, ge=1, le=100),
           mode: Literal["auto", "hybrid", "dense", "sparse"] = "auto",
           group_by: Literal["document", "chunk"] = Query(
               "document", description="document: one hit per document with its matching chunks (k documents); "
                                       "chunk: the k best chunks."),
           source_id: str | None = Query(None, max_length=300),
           uri_prefix: str | None = Query(None, max_length=1000),
           where: str | None = Query(None, max_length=4000, description="A Chroma where filter, as JSON.")) -> list[dict[str, Any]]:
    from headwater.retrieval.searcher import Filters

    svc = services(request)
    parsed = None
    if where is not None:
        try:
            parsed = json.loads(where)
        except json.JSONDecodeError:
            raise HTTPException(422, "where is not valid JSON") from None
        if not isinstance(parsed, dict) or not parsed:
            raise HTTPException(422, "where must be a non-empty JSON object")
    try:
        hits = svc.backend.search(q, k, mode, Filters(source_id, uri_prefix, parsed), group_by)
    except ConfigurationError as exc:
        raise HTTPException(409, str(exc)) from None
    except (ValueError, TypeError, KeyError) as exc:
        raise HTTPException(422, f"invalid search: {exc}") from None
    except Exception as exc:  # noqa: BLE001  (Chroma rejects a malformed where filter with its own error types)
        if parsed is not None and type(exc).__module__.startswith("chromadb"):
            raise HTTPException(422, f"invalid where filter: {exc}") from None
        raise
    return [h.to_json() for h in hits]


@secured.get("/queues", summary="Queue depth per stage and the workers serving each queue")
def queues(request: Request) -> dict[str, Any]:
    return services(request).backend.queues()


@secured.get("/workers", summary="Workers: online, offline (heartbeat lost, with when last seen) or stopped, "
                                   "with their queues, pool size and current steps")
def workers(request: Request) -> list[dict[str, Any]]:
    return services(request).backend.workers()


@secured.get("/stats", summary="Chart data: documents per minute and queue depth over time")
def stats(request: Request) -> dict[str, Any]:
    return services(request).stats.series()


router.include_router(secured)

"""The admin dashboard under /admin: server-rendered pages, a login that sets a signed session cookie,
CSRF tokens on every form, and small scripts that refresh live panels and draw the charts.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from pydantic import ValidationError

from headwater.http.auth import SESSION_COOKIE

router = APIRouter(prefix="/admin", include_in_schema=False)
templates = Jinja2Templates(directory=Path(__file__).parent / "templates")


def _when(ts: float | None) -> str:
    if not ts:
        return "—"
    delta = time.time() - ts
    if abs(delta) < 60:
        return "just now" if delta >= 0 else "in <1 min"
    minutes = int(abs(delta) // 60)
    text = f"{minutes} min" if minutes < 120 else f"{minutes // 60} h"
    return f"{text} ago" if delta >= 0 else f"in {text}"


def _utc(ts: float | None) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") if ts else ""


templates.env.filters["when"] = _when
templates.env.filters["utc"] = _utc


class NotLoggedIn(Exception):
    pass


def _svc(request: Request) -> Any:
    return request.app.state.services


def _form_post(request: Request, csrf: str) -> tuple[dict[str, Any], Any]:
    """The session and services of a state-changing form post, after its CSRF token checked out."""
    session = _session(request)
    svc = _svc(request)
    svc.auth.check_csrf(session, csrf)
    return session, svc


def _session(request: Request) -> dict[str, Any]:
    session = _svc(request).auth.session(request)
    if session is None:
        if request.method == "GET":
            raise HTTPException(401, "log in first")
        raise HTTPException(403, "log in first")
    return session


async def http_error(request: Request, exc: HTTPException) -> Response:
    """Dashboard auth failures: a GET goes to the login page, a POST is refused and changes nothing."""
    if exc.status_code == 401 and request.method == "GET":
        return RedirectResponse(f"/admin/login?next={quote(request.url.path)}", status_code=303)
    return templates.TemplateResponse(request, "error.html", {"message": exc.detail, "session": None},
                                      status_code=exc.status_code)


def _render(request: Request, name: str, session: dict[str, Any] | None, status_code: int = 200, **context: Any) -> HTMLResponse:
    svc = _svc(request)
    return templates.TemplateResponse(request, name, {"session": session, "serve_mode": svc.backend.mode,
                                                      "collection": svc.settings.collection, **context},
                                      status_code=status_code)


def _back(path: str, notice: str = "") -> RedirectResponse:
    return RedirectResponse(path + (f"?notice={quote(notice)}" if notice else ""), status_code=303)


# Login -----------------------------------------------------------------------------------------


@router.get("/login")
def login_page(request: Request, next: str = "/admin") -> Response:  # noqa: A002
    if _svc(request).auth.session(request) is not None:
        return RedirectResponse("/admin", status_code=303)
    return _render(request, "login.html", None, next=next if next.startswith("/admin") else "/admin")


@router.post("/login")
def login(request: Request, token: str = Form(""), next: str = Form("/admin")) -> Response:  # noqa: A002
    auth = _svc(request).auth
    client = request.client.host if request.client else "?"
    if auth.login_throttled(client):
        return _render(request, "login.html", None, status_code=429, next="/admin",
                       error="Too many wrong tokens from this address; wait a minute and try again.")
    if not auth.token_matches(token):
        auth.login_failed(client)
        return _render(request, "login.html", None, status_code=401, error="That token is not valid.", next="/admin")
    target = next if next.startswith("/admin") and not next.startswith("/admin/login") else "/admin"
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(SESSION_COOKIE, auth.new_session(), max_age=auth.max_age, httponly=True,
                        secure=auth.secure, samesite="strict", path="/")
    return response


@router.post("/logout")
def logout(request: Request, csrf: str = Form("")) -> Response:
    session = _session(request)
    _svc(request).auth.check_csrf(session, csrf)
    response = RedirectResponse("/admin/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


# Pages -----------------------------------------------------------------------------------------


def _sources(request: Request) -> list[dict[str, Any]]:
    svc = _svc(request)
    summary = svc.stats.source_summary()
    rows = []
    for source in svc.catalog.all():
        runs = svc.backend.list_runs(20, source.id)
        last = runs[0] if runs else None
        finished = next((r for r in runs if r["finished"]), None)
        rows.append({"source": source, "last": last, "next_run_at": svc.backend.next_run_at(source.id),
                     "errors": len(finished["errors"]) if finished else 0,
                     "errors_run": finished["id"] if finished else None,
                     "documents": summary.get(source.id, {}).get("documents", 0),
                     "chunks": summary.get(source.id, {}).get("chunks", 0)})
    return rows


def _live_context(request: Request) -> dict[str, Any]:
    svc = _svc(request)
    return {"sources": _sources(request), "queues": svc.backend.queues(), "runs": svc.backend.list_runs(15)}


@router.get("", response_class=HTMLResponse)
def dashboard(request: Request, notice: str = "") -> Response:
    session = _session(request)
    return _render(request, "dashboard.html", session, notice=notice, form={}, **_live_context(request))


@router.get("/fragments/live", response_class=HTMLResponse)
def live_fragment(request: Request) -> Response:
    session = _session(request)
    return _render(request, "_live.html", session, **_live_context(request))


@router.get("/stats.json")
def stats_json(request: Request) -> JSONResponse:
    _session(request)
    return JSONResponse(_svc(request).stats.series())


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, run_id: str, notice: str = "") -> Response:
    session = _session(request)
    run = _svc(request).backend.get_run(run_id)
    if run is None:
        raise HTTPException(404, f"no run {run_id}")
    return _render(request, "run.html", session, run=run, notice=notice)


@router.get("/fragments/runs/{run_id}", response_class=HTMLResponse)
def run_fragment(request: Request, run_id: str) -> Response:
    session = _session(request)
    run = _svc(request).backend.get_run(run_id)
    if run is None:
        raise HTTPException(404, f"no run {run_id}")
    return _render(request, "_run.html", session, run=run)


@router.get("/search", response_class=HTMLResponse)
def search_page(request: Request, q: str = "", mode: str = "auto", source_id: str = "", k: int = 10,
                group_by: str = "document") -> Response:
    from headwater.retrieval.searcher import Filters

    session = _session(request)
    hits, error = [], ""
    group_by = "chunk" if group_by == "chunk" else "document"
    if q.strip():
        try:
            hits = _svc(request).backend.search(q, max(1, min(k, 50)), mode if mode in ("auto", "hybrid", "dense", "sparse") else "auto",
                                               Filters(source_id or None), group_by)
        except Exception as exc:  # noqa: BLE001  (shown to the operator, e.g. no collection yet)
            error = str(exc)
    return _render(request, "search.html", session, q=q, mode=mode, source_id=source_id, hits=hits, error=error,
                   group_by=group_by,
                   sources=[s.id for s in _svc(request).catalog.all()])


# Actions (POST, CSRF-checked) --------------------------------------------------------------------


@router.post("/sources")
def add_source(request: Request, csrf: str = Form(""), id: str = Form(""), path: str = Form(""),  # noqa: A002
               include: str = Form(""), schedule_interval_seconds: str = Form(""), schedule_cron: str = Form("")) -> Response:
    from headwater.http.sources import SourceIn, config_from

    session, svc = _form_post(request, csrf)
    form = {"id": id, "path": path, "include": include, "schedule_interval_seconds": schedule_interval_seconds,
            "schedule_cron": schedule_cron}
    try:
        body = SourceIn(id=id.strip(), kind="folder",
                        options={"path": path.strip(), "include": [p.strip() for p in include.split(",") if p.strip()] or ["**"]},
                        schedule_interval_seconds=float(schedule_interval_seconds) if schedule_interval_seconds.strip() else None,
                        schedule_cron=schedule_cron.strip() or None)
        body.check_roots(svc.settings.folder_roots)
        if svc.catalog.get(body.id) is not None:
            raise ValueError(f"source {body.id} already exists")
        svc.store.create_source(config_from(body, body.id), {})
    except ValidationError as exc:
        message = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'source'}: {e['msg']}" for e in exc.errors())
        return _render(request, "dashboard.html", session, status_code=422, error=message, form=form, **_live_context(request))
    except ValueError as exc:
        return _render(request, "dashboard.html", session, status_code=422, error=str(exc), form=form, **_live_context(request))
    source = svc.catalog.get(body.id)
    svc.backend.schedule_changed(source)
    run_id, _ = svc.backend.trigger(source)
    return _back(f"/admin/runs/{run_id}", f"Added {body.id}; its first sync is running.")


@router.post("/sources/{source_id}/sync")
def sync_source(request: Request, source_id: str, csrf: str = Form("")) -> Response:
    session, svc = _form_post(request, csrf)
    source = svc.catalog.get(source_id)
    if source is None:
        raise HTTPException(404, f"no source {source_id}")
    try:
        run_id, busy = svc.backend.trigger(source)
    except ValueError as exc:
        return _back("/admin", str(exc))
    if run_id is None:
        return _back(f"/admin/runs/{busy}", "This source already has a run in progress.")
    return _back(f"/admin/runs/{run_id}")


@router.post("/sources/{source_id}/delete")
def delete_source(request: Request, source_id: str, csrf: str = Form("")) -> Response:
    session, svc = _form_post(request, csrf)
    source = svc.catalog.get(source_id)
    if source is None or source.read_only:
        return _back("/admin", f"{source_id} cannot be removed here")
    svc.store.delete_source(source_id)
    svc.backend.schedule_removed(source_id)
    return _back("/admin", f"Removed {source_id} (its indexed documents stay in the collection).")


@router.post("/runs/{run_id}/retry")
def retry_run(request: Request, run_id: str, csrf: str = Form("")) -> Response:
    session, svc = _form_post(request, csrf)
    try:
        new_run, busy = svc.backend.retry(run_id)
    except (LookupError, ValueError) as exc:
        return _back(f"/admin/runs/{run_id}", str(exc))
    if new_run is None:
        return _back(f"/admin/runs/{busy}", "This source already has a run in progress.")
    return _back(f"/admin/runs/{new_run}", "Retrying the failed documents.")


@router.post("/runs/{run_id}/cancel")
def cancel_run(request: Request, run_id: str, csrf: str = Form("")) -> Response:
    session, svc = _form_post(request, csrf)
    outcome = svc.backend.cancel(run_id)
    return _back(f"/admin/runs/{run_id}", "Cancelled." if outcome else "The run had already finished.")

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

from headwater.http import flash
from headwater.http.auth import SESSION_COOKIE

router = APIRouter(prefix="/admin", include_in_schema=False)
templates = Jinja2Templates(directory=Path(__file__).parent / "templates")


def _when(ts: float | None) -> str:
    if not ts:
        return "—"
    delta = time.time() - ts
    if abs(delta) < 60:  # in seconds: a worker last seen 50 s ago has not been seen "just now"
        seconds = int(abs(delta))
        return "just now" if seconds < 2 else f"{seconds} s ago" if delta >= 0 else f"in {seconds} s"
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


async def http_error(request: Request, exc: Any) -> Response:
    """Dashboard errors as pages: a GET without a session goes to the login page; anything else refused
    says why, in words, and (for a post) that nothing changed."""
    if exc.status_code == 401 and request.method == "GET":
        return RedirectResponse(f"/admin/login?next={quote(request.url.path)}", status_code=303)
    svc = getattr(request.app.state, "services", None)
    session = svc.auth.session(request) if svc is not None and exc.status_code not in (401, 403) else None
    return templates.TemplateResponse(request, "error.html", {
        "message": exc.detail if isinstance(exc.detail, str) else "The request was refused.",
        "session": session, "status": exc.status_code, "unchanged": request.method == "POST",
        "serve_mode": svc.backend.mode if svc else "", "collection": svc.settings.collection if svc else ""},
        status_code=exc.status_code)


async def invalid_request(request: Request, problems: list[tuple[str, str]]) -> Response:
    """A dashboard request whose parameters did not parse (a letter in a number, say): a page naming each."""
    words = "; ".join(f"{field}: {message}" for field, message in problems)
    return await http_error(request, HTTPException(422, f"The request was not understood ({words})."))


def _render(request: Request, name: str, session: dict[str, Any] | None, status_code: int = 200, **context: Any) -> HTMLResponse:
    """A page (with the flash a form post left for it: its message, and a refusal's 4xx status), or a
    fragment (templates named _*, polled by the page: they never take the flash)."""
    svc = _svc(request)
    shown = None if name.startswith("_") else flash.take(request, session)
    if shown is not None and shown.refused:
        context.update(error=shown.message, unchanged=True)
        status_code = shown.status
    elif shown is not None:
        context["notice"] = shown.message
    response = templates.TemplateResponse(request, name, {"session": session, "serve_mode": svc.backend.mode,
                                                          "collection": svc.settings.collection, **context},
                                          status_code=status_code)
    if not name.startswith("_"):
        flash.forget(request, response)
    return response


# Login -----------------------------------------------------------------------------------------


@router.get("/login")
def login_page(request: Request, next: str = "/admin") -> Response:  # noqa: A002
    if _svc(request).auth.session(request) is not None:
        return RedirectResponse("/admin", status_code=303)
    return _render(request, "login.html", None, next=next if next.startswith("/admin") else "/admin")


@router.post("/login")
def login(request: Request, token: str = Form(""), next: str = Form("/admin")) -> Response:  # noqa: A002
    auth = _svc(request).auth
    if not auth.token_matches(token):  # the right token always gets in, however many wrong ones came before
        wait = auth.wrong_token("login", request)
        if wait is not None:
            response = _render(request, "login.html", None, status_code=429, next="/admin",
                               error=f"Too many wrong tokens from this address; try again in {wait:.0f} seconds.")
            response.headers["Retry-After"] = str(int(wait))
            return response
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
    from headwater.http.source_view import latest_finish

    svc = _svc(request)
    paused = svc.store.paused_schedules()
    rows = []
    for source in svc.catalog.all():
        runs = svc.backend.list_runs(20, source.id)
        last = runs[0] if runs else None
        finished = next((r for r in runs if r["finished"]), None)
        rows.append({"source": source, "last": last, "paused": source.id in paused,
                     "next_run_at": None if source.id in paused else svc.backend.next_run_at(source.id),
                     "errors": len(finished["errors"]) if finished else 0,
                     "errors_run": finished["id"] if finished else None,
                     "finished_at": finished.get("finished_at") if finished else None})
    summary = svc.stats.source_summary(fresh_after=latest_finish(row["finished_at"] for row in rows))
    for row in rows:
        counts = summary.get(row["source"].id, {})
        row["documents"], row["chunks"] = counts.get("documents", 0), counts.get("chunks", 0)
    return rows


def _live_context(request: Request) -> dict[str, Any]:
    svc = _svc(request)
    return {"sources": _sources(request), "queues": svc.backend.queues(), "runs": svc.backend.list_runs(15),
            "workers": svc.backend.workers()}


@router.get("", response_class=HTMLResponse)
def dashboard(request: Request) -> Response:
    session = _session(request)
    return _render(request, "dashboard.html", session, **_live_context(request))


@router.get("/fragments/live", response_class=HTMLResponse)
def live_fragment(request: Request) -> Response:
    session = _session(request)
    return _render(request, "_live.html", session, **_live_context(request))


@router.get("/stats.json")
def stats_json(request: Request) -> JSONResponse:
    _session(request)
    return JSONResponse(_svc(request).stats.series())


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, run_id: str) -> Response:
    session = _session(request)
    run = _svc(request).backend.get_run(run_id)
    if run is None:
        raise HTTPException(404, f"There is no run {run_id} (or its history was trimmed).")
    return _render(request, "run.html", session, run=run)


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


# Sources ---------------------------------------------------------------------------------------


def _source_page(request: Request, session: dict[str, Any], kind: str, source: Any = None) -> HTMLResponse:
    """A source's page: its form (kind-specific fields from the kind's options model), and for a stored
    source its settings, runs, failed and skipped documents and actions. A form the last post refused
    (in the flash) is shown again as it was typed, beside the reason."""
    from connectors import registered_kinds
    from headwater.http.source_forms import option_fields
    from headwater.http.source_view import form_values, source_context

    shown = flash.take(request, session)
    typed = shown.form if shown is not None and shown.refused else None
    options = source.config.options if source is not None else {}
    values = dict(typed) if typed is not None else (form_values(source.config) if source is not None else {})
    context = source_context(_svc(request), source) if source is not None else {}
    return _render(request, "source.html", session, source=source, kind=kind, kinds=registered_kinds(),
                   fields=option_fields(kind, options, typed), values=values, **context)


@router.get("/sources/new", response_class=HTMLResponse)
def new_source_page(request: Request, kind: str = "folder") -> Response:
    from connectors import registered_kinds

    session = _session(request)
    if kind not in registered_kinds():
        raise HTTPException(404, f"There is no source kind {kind}; known kinds: {', '.join(registered_kinds())}.")
    return _source_page(request, session, kind)


@router.get("/sources/{source_id}", response_class=HTMLResponse)
def source_page(request: Request, source_id: str) -> Response:
    session = _session(request)
    source = _svc(request).catalog.get(source_id)
    if source is None:
        raise HTTPException(404, f"There is no source {source_id}.")
    return _source_page(request, session, source.config.kind, source)


@router.get("/fragments/sources/{source_id}/runs", response_class=HTMLResponse)
def source_runs_fragment(request: Request, source_id: str) -> Response:
    from headwater.http.source_view import source_context

    session = _session(request)
    source = _svc(request).catalog.get(source_id)
    if source is None:
        raise HTTPException(404, f"There is no source {source_id}.")
    return _render(request, "_source_runs.html", session, source=source,
                   **source_context(_svc(request), source, counts_max_age=60))


# Run actions (POST, CSRF-checked; 303 with a flash) ----------------------------------------------


@router.post("/runs/{run_id}/retry")
def retry_run(request: Request, run_id: str, csrf: str = Form("")) -> Response:
    from headwater.http.source_actions import retry_run_redirect

    session, svc = _form_post(request, csrf)
    return retry_run_redirect(request, session, svc, run_id, f"/admin/runs/{run_id}")


@router.post("/runs/{run_id}/cancel")
def cancel_run(request: Request, run_id: str, csrf: str = Form("")) -> Response:
    session, svc = _form_post(request, csrf)
    outcome = svc.backend.cancel(run_id)
    if outcome is None:
        return flash.redirect(request, session, "/admin", f"There is no run {run_id}.", status=404)
    if not outcome:
        return flash.redirect(request, session, f"/admin/runs/{run_id}", "The run had already finished.", status=409)
    return flash.redirect(request, session, f"/admin/runs/{run_id}", "Cancelled.")

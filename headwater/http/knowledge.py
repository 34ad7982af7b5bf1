"""Consolidated knowledge in the HTTP app: its records with their decisions and provenance.

`GET /api/v1/knowledge` (token) and `/admin/knowledge` (dashboard session) read the knowledge
collection next to a data collection; nothing here decides or writes (the consolidation stage does).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, Response

from headwater.http import admin
from headwater.http.api import authenticated, services

api_router = APIRouter(prefix="/api/v1", tags=["api"], dependencies=[Depends(authenticated)])
admin_router = APIRouter(prefix="/admin", include_in_schema=False)
_SHOWN = ("decision", "reason", "method", "model", "similarity", "chunk_ids", "uris", "source_ids", "doc_versions",
          "newer_chunk_ids", "superseded_chunk_ids", "conflicting", "decided_at")


def knowledge_view(svc: Any, collection: str | None, decision: str | None, limit: int) -> dict[str, Any]:
    """The knowledge records of a collection (most recent decisions first) and the last pass's summary."""
    from headwater.consolidation.config import ConsolidationSettings

    name = collection or svc.settings.collection
    knowledge_name = ConsolidationSettings().knowledge_name(name)
    client = svc.backend.store_for(name).client
    from chromadb.errors import NotFoundError

    try:
        found = client.get_collection(knowledge_name, embedding_function=None)
    except (NotFoundError, ValueError):  # not consolidated yet (ValueError: how older clients say it)
        return {"collection": name, "knowledge_collection": knowledge_name, "records": [], "last_pass": None}
    got = found.get(where={"decision": decision} if decision else None, include=["documents", "metadatas"])
    records = [{"id": i, "text": t, **{k: m.get(k) for k in _SHOWN}}
               for i, t, m in zip(got["ids"], got["documents"], got["metadatas"])]
    records.sort(key=lambda r: (r["decided_at"] or "", r["id"]), reverse=True)
    from headwater.consolidation.knowledge import last_pass

    last = last_pass(found)
    return {"collection": name, "knowledge_collection": knowledge_name, "records": records[:limit], "last_pass": last}


_DECISIONS = ("duplicate", "supersedes", "complementary", "conflicting", "unrelated")


@api_router.get("/knowledge", summary="Consolidated knowledge: decisions with provenance to every chunk")
def knowledge(request: Request, collection: str | None = Query(None, max_length=300),
              decision: str | None = Query(None, pattern="^(duplicate|supersedes|complementary|conflicting|unrelated)$"),
              limit: int = Query(100, ge=1, le=1000)) -> dict[str, Any]:
    try:
        return knowledge_view(services(request), collection, decision, limit)
    except Exception as exc:  # noqa: BLE001  (no such collection on this target)
        if type(exc).__module__.startswith(("chromadb", "headwater")):
            raise HTTPException(404, str(exc)) from None
        raise


@admin_router.get("/knowledge", response_class=HTMLResponse)
def knowledge_page(request: Request, collection: str = "", decision: str = "") -> Response:
    session = admin._session(request)
    view, error = None, ""
    try:
        view = knowledge_view(admin._svc(request), collection or None, decision or None, 200)
    except Exception as exc:  # noqa: BLE001  (shown to the operator)
        error = str(exc)
    return admin._render(request, "knowledge.html", session, view=view, error=error, decision=decision,
                         collections=admin._svc(request).catalog.collections(), decisions=_DECISIONS)

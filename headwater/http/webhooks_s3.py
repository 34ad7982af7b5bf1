"""POST /webhooks/s3/{source_id}: S3 event notifications pushed over HTTP by S3-compatible stores (MinIO and
others send S3's event JSON). Bearer-token authenticated; each event becomes a live change of the source.

Checked in this order, and nothing is enqueued unless all pass: the token (401), the body is an S3
event notification (400), the source exists and is an S3 source (404 / 400). Events for another
bucket or outside the source's prefix are ignored and counted. The store's sequencer is not trusted
for ordering (MinIO's is only a modification time): each key is resolved by a HEAD of the object.
"""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse

from connectors.s3_events import MalformedEvent, parse_message

router = APIRouter(prefix="/webhooks", tags=["webhooks"])
MAX_BODY_BYTES = 4 * 1048576  # S3 notifications are a few KB; a larger body is not one


def _check_token(request: Request) -> None:
    configured = request.app.state.services.settings.s3_webhook_token
    if configured is None:
        raise HTTPException(404, "S3 webhooks are off: set HEADWATER_S3_WEBHOOK_TOKEN to turn them on")
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    expected = configured.get_secret_value().encode()
    if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode("utf-8", "surrogateescape"), expected):
        raise HTTPException(401, "send the S3 webhook token as `Authorization: Bearer <token>`",
                            headers={"WWW-Authenticate": "Bearer"})


@router.post("/s3/{source_id}", status_code=202, summary="S3 event notifications for one S3 source (bearer token)")
async def s3_events(request: Request, source_id: str) -> JSONResponse:
    _check_token(request)
    body = await request.body()
    if len(body) > MAX_BODY_BYTES:
        raise HTTPException(413, "the body is larger than any S3 event notification")
    try:
        parsed = parse_message(body)
    except MalformedEvent as exc:
        raise HTTPException(400, f"not an S3 event notification: {exc}") from None
    from starlette.concurrency import run_in_threadpool

    # HEAD requests and the enqueue block: off the event loop.
    return await run_in_threadpool(_enqueue, request.app.state.services, source_id, parsed)


def _enqueue(svc: Any, source_id: str, parsed: Any) -> JSONResponse:
    from dataclasses import replace

    from headwater.http.sources import build_source_connector

    source = svc.catalog.get(source_id)
    if source is None:
        raise HTTPException(404, f"no source {source_id}")
    if source.config.kind != "s3":
        raise HTTPException(400, f"source {source_id} is a {source.config.kind} source, not an S3 source")
    connector = build_source_connector(svc.settings, source.config)
    events = [replace(event, sequencer=None) for event in parsed.events]
    try:
        changes, counts, _ = connector.changes_for(events)
    except OSError as exc:  # the store did not answer the HEAD: the sender retries on a non-2xx
        raise HTTPException(503, f"could not read the objects' current state ({exc}); send the events again") from None
    run_id = svc.backend.live_changes(source, changes) if changes else None
    return JSONResponse({"run_id": run_id, "changes": len(changes), "ignored": counts["ignored"],
                         "test_events": parsed.test_events}, status_code=202)

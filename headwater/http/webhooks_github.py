"""POST /webhooks/github: GitHub push webhooks for git sources, verified by their HMAC signature.

No admin token here: a delivery proves itself with `X-Hub-Signature-256`, the HMAC-SHA256 of the
raw body under the webhook secret of a git source that follows the payload's repository (the
secret's environment variable is named in the source's `webhook_secret_env`). A missing or wrong
signature, or a repository no source follows, is a 401 and nothing is queued; the last two get the
same answer, so an unauthenticated caller cannot learn which repositories are followed (the log
says which it was). A verified push to a followed branch is answered 202 at once and synced in the
background; its `X-GitHub-Delivery` id is remembered, so a redelivery or a replay does nothing.
The id is taken before the push is submitted (two deliveries at once: one wins) and released
if submitting fails (503) or the push later fails, so that GitHub's redelivery is not lost as a
duplicate. Pings answer 200; other events, other branches and tags are acknowledged (200) and ignored.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from headwater.errors import ConfigurationError

log = logging.getLogger("headwater.webhooks")
router = APIRouter(tags=["webhooks"])
_REPOSITORY_URL_FIELDS = ("clone_url", "html_url", "ssh_url", "git_url", "svn_url", "url")
# One answer for a wrong signature and for a repository no source follows (which is not to be told).
NOT_VERIFIED = "X-Hub-Signature-256 does not verify; check the webhook's secret"


def signature_of(secret: bytes, body: bytes) -> str:
    """GitHub's X-Hub-Signature-256 for a body: `sha256=` and the hex HMAC-SHA256 of the raw bytes."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def signature_matches(secret: bytes, body: bytes, header: str) -> bool:
    return hmac.compare_digest(signature_of(secret, body).encode(), header.strip().encode("utf-8", "replace"))


def payload_of(body: bytes, content_type: str) -> dict[str, Any] | None:
    """The JSON payload (GitHub sends it raw, or form-encoded as `payload=`); None when it is neither."""
    try:
        if content_type.startswith("application/x-www-form-urlencoded"):
            body = parse_qs(body.decode("utf-8"), max_num_fields=10).get("payload", [""])[0].encode()
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def follows(source: Any, repository: dict[str, Any]) -> bool:
    """Whether a git source follows the payload's repository (by any of its URLs, or its owner/name)."""
    from connectors.git import repository_key

    options = source.config.options
    url = options.get("url")
    if not url:
        return False
    if options.get("repository") and options["repository"] == repository.get("full_name"):
        return True
    wanted = repository_key(url)
    return any(isinstance(repository.get(f), str) and repository_key(repository[f]) == wanted
               for f in _REPOSITORY_URL_FIELDS)


def _reply(code: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"detail": message, **extra}, status_code=code)


@router.post("/webhooks/github", summary="GitHub webhook: push events sync git sources (signed; no token)")
async def github_webhook(request: Request) -> JSONResponse:
    svc = request.app.state.services
    limit = svc.settings.webhook_max_body_bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return _reply(413, f"body larger than {limit} bytes")
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > limit:
            return _reply(413, f"body larger than {limit} bytes")
    return await run_in_threadpool(_deliver, svc, request.headers, bytes(body))


def _deliver(svc: Any, headers: Any, body: bytes) -> JSONResponse:
    signature = headers.get("x-hub-signature-256")
    if not signature:
        return _reply(401, "missing X-Hub-Signature-256; set a secret on the webhook (content type application/json)")
    payload = payload_of(body, headers.get("content-type", ""))
    repository = payload.get("repository") if payload else None
    if not isinstance(repository, dict):
        return _reply(401, "the delivery names no repository, so its signature cannot be checked")
    delivery = headers.get("x-github-delivery", "")
    sources = [s for s in svc.catalog.all() if s.config.kind == "git" and follows(s, repository)]
    if not sources:
        log.warning("GitHub delivery %.100r refused: no git source follows repository %.200r", delivery,
                    repository.get("full_name"))
        return _reply(401, NOT_VERIFIED)
    verified = [s for s in sources if _signed_by(s, body, signature)]
    if not verified:
        log.warning("GitHub delivery %.100r refused: its signature matches the webhook secret of no git source "
                    "of repository %.200r (%s)", delivery, repository.get("full_name"), ", ".join(s.id for s in sources))
        return _reply(401, NOT_VERIFIED)

    event = headers.get("x-github-event", "")
    if event == "ping":
        return _reply(200, "pong")
    if event != "push":
        return _reply(200, f"{event or 'unnamed'} events are ignored", status="ignored")
    ref = str(payload.get("ref", ""))  # type: ignore[union-attr]
    if not ref.startswith("refs/heads/"):
        return _reply(200, f"{ref or 'this ref'} is not a branch; ignored", status="ignored")
    branch = ref[len("refs/heads/"):]
    targets = [s for s in verified if s.config.options.get("branch", "main") == branch]
    if not targets:
        return _reply(200, f"no git source follows branch {branch}; ignored", status="ignored")
    if not delivery:
        return _reply(400, "missing X-GitHub-Delivery")
    cursors = svc.backend.cursors
    if not cursors.first_delivery(delivery, svc.settings.webhook_delivery_ttl_seconds):
        return _reply(200, f"delivery {delivery[:100]} was already taken; nothing to do", status="duplicate")

    from headwater.sync.git_pushes import Push

    queued = []
    try:
        for source in targets:
            # Embedded serve answers with the run that will apply it; a fleet's run is made once the push is diffed.
            run_id = svc.backend.submit_push(source, Push.from_payload(source.id, payload, delivery))  # type: ignore[arg-type]
            queued.append({"source_id": source.id, "run_id": run_id})
    except Exception as exc:  # noqa: BLE001  (not queued, whatever the reason: GitHub may deliver it again)
        # A source already submitted sees its commit synced when the redelivery comes, and does nothing.
        cursors.release_delivery(delivery)
        log.warning("GitHub delivery %.100r was not queued (%s); a redelivery will be taken", delivery,
                    type(exc).__name__)
        return _reply(503, "the push could not be queued; redeliver it")
    return _reply(202, "queued", status="queued", sources=queued)


def _signed_by(source: Any, body: bytes, signature: str) -> bool:
    from headwater.secrets import secret_from_env

    env_name = source.config.options.get("webhook_secret_env")
    if not env_name:
        log.warning("git source %s has no webhook_secret_env; its deliveries cannot be verified", source.id)
        return False
    try:
        secret = secret_from_env(env_name, f"git source {source.id}: webhook_secret_env").encode()
    except ConfigurationError as exc:
        log.warning("%s", exc)
        return False
    return signature_matches(secret, body, signature)

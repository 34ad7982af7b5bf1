"""One-time messages across a dashboard POST-redirect-GET.

Every dashboard form answers 303 to a page, so a reload never posts again; what the post did, or
why it was refused (with what the refused form held, to show it again), travels to that page as a
flash that is read once. A single serve keeps it in a signed cookie of its own; a fleet's serve
replicas keep it in their shared Redis, so whichever replica answers the GET finds it. Either way it
belongs to one dashboard session and expires within minutes if never read.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from fastapi import Request, Response
from fastapi.responses import RedirectResponse
from itsdangerous import BadSignature, URLSafeTimedSerializer

FLASH_COOKIE = "headwater_flash"
TTL_SECONDS = 120
# Browsers drop cookies over 4 KB; a refused form too long to carry comes back empty, with the error.
COOKIE_LIMIT = 3800
NOTHING_CHANGED = "Nothing was changed."


@dataclass(frozen=True)
class Flash:
    message: str
    status: int = 200  # the status of the page that shows it: a refusal's 4xx, so clients see it was refused
    form: dict[str, str] | None = None  # what a refused form held
    refused: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "refused", self.status >= 400)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("refused")
        return data

    @classmethod
    def from_json(cls, data: Any) -> Flash | None:
        if not isinstance(data, dict) or not isinstance(data.get("message"), str):
            return None
        form = data.get("form")
        form = {str(k): str(v) for k, v in form.items()} if isinstance(form, dict) else None
        status = data.get("status")
        return cls(data["message"], status if isinstance(status, int) and 200 <= status < 600 else 200, form)


def _owner(session: dict[str, Any]) -> str:
    """Which session a flash belongs to: a digest of its CSRF token (random per login, never shown)."""
    return hashlib.sha256(str(session.get("csrf", "")).encode()).hexdigest()[:32]


class CookieFlashes:
    """Flashes in a signed cookie of their own (one serve process, or replicas sharing the session secret)."""

    def __init__(self, serializer: URLSafeTimedSerializer, secure: bool) -> None:
        self._signer, self._secure = serializer, secure

    def put(self, response: Response, session: dict[str, Any], flash: Flash) -> None:
        value = self._signer.dumps({"owner": _owner(session), **flash.to_json()})
        if len(value) > COOKIE_LIMIT:
            value = self._signer.dumps({"owner": _owner(session), **Flash(flash.message, flash.status).to_json()})
        response.set_cookie(FLASH_COOKIE, value, max_age=TTL_SECONDS, httponly=True, secure=self._secure,
                            samesite="strict", path="/admin")

    def take(self, request: Request, session: dict[str, Any]) -> Flash | None:
        raw = request.cookies.get(FLASH_COOKIE)
        if not raw:
            return None
        try:
            data = self._signer.loads(raw, max_age=TTL_SECONDS)
        except BadSignature:
            return None
        if not isinstance(data, dict) or data.pop("owner", None) != _owner(session):
            return None
        return Flash.from_json(data)

    def forget(self, request: Request, response: Response) -> None:
        if FLASH_COOKIE in request.cookies:
            response.delete_cookie(FLASH_COOKIE, path="/admin")


class RedisFlashes:
    """Flashes in Redis under the session's digest: every serve replica of a fleet reads the same ones."""

    KEY = "headwater:flash:{}"

    def __init__(self, redis: Any) -> None:
        self.redis = redis

    def put(self, response: Response, session: dict[str, Any], flash: Flash) -> None:
        self.redis.set(self.KEY.format(_owner(session)), json.dumps(flash.to_json()), ex=TTL_SECONDS)

    def take(self, request: Request, session: dict[str, Any]) -> Flash | None:
        pipe = self.redis.pipeline(transaction=True)  # read and delete as one: a flash is shown once
        key = self.KEY.format(_owner(session))
        pipe.get(key)
        pipe.delete(key)
        raw, _ = pipe.execute()
        if raw is None:
            return None
        try:
            return Flash.from_json(json.loads(raw))
        except ValueError:
            return None

    def forget(self, request: Request, response: Response) -> None: ...


def _flashes(request: Request) -> Any:
    return request.app.state.services.flashes


def redirect(request: Request, session: dict[str, Any], path: str, message: str = "", *, status: int = 200,
             form: dict[str, str] | None = None) -> RedirectResponse:
    """303 to `path`, whose page shows `message` once (a refusal, status >= 400: with that nothing changed)."""
    response = RedirectResponse(path, status_code=303)
    if message:
        _flashes(request).put(response, session, Flash(message, status, form))
    return response


def take(request: Request, session: dict[str, Any] | None) -> Flash | None:
    """The flash waiting for this page (read once per request: a page may ask before it renders)."""
    if session is None:
        return None
    if not hasattr(request.state, "flash"):
        request.state.flash = _flashes(request).take(request, session)
    return request.state.flash


def forget(request: Request, response: Response) -> None:
    """After a page showed its flash: drop it from the browser (cookie flashes)."""
    if hasattr(request.state, "flash"):
        _flashes(request).forget(request, response)

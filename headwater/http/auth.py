"""Authentication: an admin token for the API (Bearer), a signed session cookie for the dashboard, CSRF tokens.

Tokens are compared with hmac.compare_digest and never logged; a session carries only a random
CSRF token and a fingerprint of the admin token, so rotating the token logs every browser out.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

from fastapi import HTTPException, Request
from itsdangerous import BadSignature, URLSafeTimedSerializer

from headwater.http.throttle import FailureThrottle
from headwater.settings import Settings

SESSION_COOKIE = "headwater_session"


class Auth:
    def __init__(self, settings: Settings, throttle: FailureThrottle | None = None) -> None:
        if settings.admin_token is None or len(settings.admin_token.get_secret_value()) < 16:
            raise ValueError("headwater serve needs HEADWATER_ADMIN_TOKEN (at least 16 characters; for example "
                             "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`)")
        self._token = settings.admin_token.get_secret_value().encode()
        secret = (settings.session_secret.get_secret_value().encode() if settings.session_secret
                  else hmac.new(self._token, b"headwater-session-v1", hashlib.sha256).digest())
        self._secret = secret
        self._sessions = URLSafeTimedSerializer(secret, salt="headwater-admin")
        self._fingerprint = hmac.new(self._token, b"fingerprint", hashlib.sha256).hexdigest()[:16]
        self.max_age = settings.session_max_age_seconds
        self.secure = settings.session_cookie_secure
        self.throttle = throttle or FailureThrottle()

    def token_matches(self, candidate: str) -> bool:
        return hmac.compare_digest(candidate.encode("utf-8", "surrogateescape"), self._token)

    def wrong_token(self, kind: str, request: Request) -> float | None:
        """Count a wrong token from this request's address; the seconds it must wait when over the limit."""
        return self.throttle.failed(kind, request.client.host if request.client else "?")

    # API -------------------------------------------------------------------------------------

    def require_token(self, request: Request) -> None:
        """401 without credentials, 403 with a wrong token; nothing runs before this passes."""
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value:
            raise HTTPException(401, "send the admin token as `Authorization: Bearer <token>`",
                                headers={"WWW-Authenticate": "Bearer"})
        if not self.token_matches(value.strip()):
            wait = self.wrong_token("bearer", request)
            if wait is not None:
                raise HTTPException(429, f"too many wrong tokens from this address; try again in {wait:.0f} s",
                                    headers={"Retry-After": str(int(wait))})
            raise HTTPException(403, "the token is not valid")

    # Dashboard -------------------------------------------------------------------------------

    def signer(self, salt: str) -> URLSafeTimedSerializer:
        """A signer with the sessions' secret and its own salt (a dashboard flash cookie, say)."""
        return URLSafeTimedSerializer(self._secret, salt=salt)

    def new_session(self) -> str:
        return self._sessions.dumps({"csrf": secrets.token_urlsafe(24), "fp": self._fingerprint})

    def session(self, request: Request) -> dict[str, Any] | None:
        raw = request.cookies.get(SESSION_COOKIE)
        if not raw:
            return None
        try:
            data = self._sessions.loads(raw, max_age=self.max_age)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not hmac.compare_digest(str(data.get("fp", "")), self._fingerprint):
            return None
        return data

    def check_csrf(self, session: dict[str, Any], submitted: str | None) -> None:
        if not submitted or not hmac.compare_digest(submitted.encode(), str(session.get("csrf", "")).encode()):
            raise HTTPException(403, "the form's CSRF token is missing or wrong; reload the page and try again")

"""Secrets out of anything that leaves the process: error reports, log lines.

Three nets, widest last: values of known secrets (every SecretStr setting, and environment
variables whose names say they hold one) are replaced wherever they appear; values under keys
that name a secret (token, password, authorization...) are replaced whole; and patterns of
credentials (passwords in URLs, bearer tokens, cloud and Git host keys, webhook signatures)
are cut out of any string. A query string (or any other percent-encoded text) carries secrets
encoded: known secrets are also replaced in their encoded forms, and a string that decodes to
something with a secret in it is reported decoded, with the secret cut out.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus, unquote_plus

FILTERED = "[Filtered]"

_SECRET_KEY = re.compile(
    r"(pass(word|wd)?|secret|token|api[_-]?key|apikey|authorization|cookie|signature|"
    r"credential|private[_-]?key|access[_-]?key|dsn|x-hub-signature)", re.IGNORECASE)
# Keys whose name matches the pattern but whose values are not secrets (ids, counters).
_NOT_SECRET = {"token_count", "tokens", "max_tokens", "session_max_age_seconds", "session_cookie_secure"}
_PATTERNS = [
    # user:password@ in any URL (redis://:pw@host, postgresql://user:pw@host, https://u:p@host)
    (re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@/\s]+)@"),
     lambda m: f"{m['scheme']}{m['user']}:{FILTERED}@"),
    (re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}"), lambda m: f"{m[1]} {FILTERED}"),
    (re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"), lambda m: FILTERED),  # AWS access key ids
    (re.compile(r"(?i)(aws_secret_access_key|secret_access_key|secretaccesskey)(\W{1,3})[A-Za-z0-9/+=]{40}"),
     lambda m: f"{m[1]}{m[2]}{FILTERED}"),
    (re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})\b"), lambda m: FILTERED),
    (re.compile(r"\bsha256=[0-9a-fA-F]{64}\b"), lambda m: f"sha256={FILTERED}"),  # webhook signatures
    (re.compile(r"\bck-[A-Za-z0-9]{20,}\b"), lambda m: FILTERED),  # Chroma Cloud API keys
    (re.compile(r"\bsk-[A-Za-z0-9_-]{20,}\b"), lambda m: FILTERED),  # OpenAI-style API keys
]
_ENV_SECRET = re.compile(r"(TOKEN|SECRET|PASSWORD|API_KEY|ACCESS_KEY|DSN|CREDENTIALS|_URL)$")
_MIN_SECRET = 6  # shorter values would blank out ordinary words


def known_secrets(settings: Any = None, environ: dict[str, str] | None = None) -> list[str]:
    """Secret values to replace wherever they appear: SecretStr settings and secret-named environment variables."""
    from pydantic import SecretStr

    found: set[str] = set()
    if settings is not None:
        for name in type(settings).model_fields:
            value = getattr(settings, name, None)
            if isinstance(value, SecretStr):
                found.add(value.get_secret_value())
                found.update(_url_passwords(value.get_secret_value()))
    for name, value in (os.environ if environ is None else environ).items():
        if _ENV_SECRET.search(name.upper()):
            found.update(_url_passwords(value) if name.upper().endswith("_URL") else {value})
    return sorted((s for s in found if len(s) >= _MIN_SECRET), key=len, reverse=True)


def _url_passwords(value: str) -> set[str]:
    return {m["pw"] for m in _PATTERNS[0][0].finditer(value)}


class Scrubber:
    """Replaces secrets in strings and nested structures (dicts, lists, tuples)."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        plain = {s for s in secrets if s and len(s) >= _MIN_SECRET}
        encoded = {form for s in plain for form in (quote(s, safe=""), quote_plus(s), quote(s))}
        self.secrets = sorted(plain | encoded, key=len, reverse=True)

    def text(self, value: str) -> str:
        value = self._plain_text(value)
        if "%" in value or "+" in value:
            # Known secrets are gone in every form by now, so decoding cannot bring one back mangled.
            decoded = unquote_plus(value)
            cleaned = self._plain_text(decoded)
            if cleaned != decoded:
                return cleaned
        return value

    def _plain_text(self, value: str) -> str:
        for secret in self.secrets:
            if secret in value:
                value = value.replace(secret, FILTERED)
        for pattern, replace in _PATTERNS:
            value = pattern.sub(replace, value)
        return value

    def value(self, value: Any, key: str | None = None) -> Any:
        if key is not None and _is_secret_key(key) and isinstance(value, (str, bytes, int, float)) and value != "":
            return FILTERED
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, bytes):
            return self.text(value.decode("utf-8", "replace"))
        if isinstance(value, dict):
            return {k: self.value(v, str(k)) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self.value(v) for v in value)
        return value


def _is_secret_key(key: str) -> bool:
    return key.lower() not in _NOT_SECRET and bool(_SECRET_KEY.search(key))

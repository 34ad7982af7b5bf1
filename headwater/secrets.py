"""Secrets a source names by environment variable (a token, a webhook secret): read when used, never stored."""

from __future__ import annotations

import os
import re

from headwater.errors import ConfigurationError

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def secret_from_env(name: str, where: str) -> str:
    """The value of the environment variable `name`; a clear error (never echoing a value) when it is unset."""
    if not _ENV_NAME.match(name):
        # The option may hold the secret itself, pasted where its variable's name belongs: never echo it.
        raise ConfigurationError(f"{where} must name an environment variable (letters, digits, _), not hold a value")
    value = os.environ.get(name)
    if not value:
        raise ConfigurationError(f"{where} names {name}, which is not set in this process's environment")
    return value

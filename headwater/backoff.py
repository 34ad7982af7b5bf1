"""How long to wait before trying again: the one backoff every retry in Headwater uses, and what a server's
Retry-After asks for."""

from __future__ import annotations

import email.utils
import random
import time


def backoff_delay(attempt: int, base_seconds: float, cap_seconds: float = float("inf")) -> float:
    """Exponential backoff with equal jitter: base * 2**attempt, capped, half of it guaranteed and half random.

    The guaranteed half makes retries span an outage; the random half keeps many clients that
    failed together from retrying together.
    """
    step = min(cap_seconds, base_seconds * 2.0 ** attempt)
    return step / 2 + random.uniform(0, step / 2)


def retry_after_seconds(value: str | None, cap_seconds: float = 3600.0) -> float | None:
    """A Retry-After header as seconds to wait (it is either a number of seconds or an HTTP date), capped."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    return min(max(seconds, 0.0), cap_seconds)

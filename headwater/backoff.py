"""How long to wait before trying again: the one backoff every retry in Headwater uses."""

from __future__ import annotations

import random


def backoff_delay(attempt: int, base_seconds: float, cap_seconds: float = float("inf")) -> float:
    """Exponential backoff with equal jitter: base * 2**attempt, capped, half of it guaranteed and half random.

    The guaranteed half makes retries span an outage; the random half keeps many clients that
    failed together from retrying together.
    """
    step = min(cap_seconds, base_seconds * 2.0 ** attempt)
    return step / 2 + random.uniform(0, step / 2)

"""Schedule intervals as people write them: seconds (`7200`) or a duration (`2h`, `90m`, `1h30m`, `1d`, `45s`).

One grammar for every surface (the source model reads it; the dashboard shows a stored interval back
in it), so what an operator typed comes back in a form they recognise rather than as `7200.0`.
"""

from __future__ import annotations

import re

UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_DURATION = re.compile(r"(?:\d+(?:\.\d+)?[dhms])+")
HOW_TO_WRITE = "write seconds (7200) or a duration such as 2h, 30m, 1h30m or 1d"


def parse_interval(text: str) -> float:
    """Seconds from `7200`, `7200.5`, `2h`, `1h30m`, `1d` (spaces and case ignored); ValueError saying how to write it."""
    compact = "".join(text.split()).lower()
    try:
        return float(compact)
    except ValueError:
        pass
    if not compact or not _DURATION.fullmatch(compact):
        raise ValueError(f"is not an interval; {HOW_TO_WRITE}")
    return float(sum(float(number) * UNIT_SECONDS[unit] for number, unit in _PART.findall(compact)))


def format_interval(seconds: float | None) -> str:
    """An interval as a person would write it: the largest whole unit (`2h`, `90m`, `1d`), else plain seconds (`45`, `1.5`)."""
    if seconds is None:
        return ""
    for unit in ("d", "h", "m"):
        size = UNIT_SECONDS[unit]
        if seconds >= size and float(seconds) % size == 0:
            return f"{int(seconds // size)}{unit}"
    return str(int(seconds)) if float(seconds).is_integer() else str(float(seconds))

"""Whether a 5-field cron line is valid, without a scheduler: sources are validated where Celery is not imported.

The fields are minute, hour, day of month, month and day of week (UTC), each `*`, a number, a range
`a-b`, a list `a,b`, and an optional step `/n`; months and weekdays may be named (jan, mon). This is
the subset that Celery's crontab (what beat runs) accepts; tests/unit/test_cron.py checks the two
agree on valid and invalid lines.
"""

from __future__ import annotations

import re

_FIELDS = (("minute", 0, 59, ()), ("hour", 0, 23, ()), ("day of month", 1, 31, ()),
           ("month", 1, 12, ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")),
           ("day of week", 0, 6, ("sun", "mon", "tue", "wed", "thu", "fri", "sat")))
_PART = re.compile(r"^(\*|[a-z0-9]+(?:-[a-z0-9]+)?)(?:/(\d+))?$")


def check_cron(line: str) -> None:
    """ValueError naming what is wrong unless `line` is a valid 5-field cron line."""
    fields = line.split()
    if len(fields) != 5:
        raise ValueError(f"a cron schedule has 5 fields (minute hour day month weekday), got {len(fields)}: {line!r}")
    for text, (name, low, high, names) in zip(fields, _FIELDS):
        for part in text.lower().split(","):
            match = _PART.match(part)
            if not match:
                raise ValueError(f"invalid cron schedule {line!r}: {part!r} is not a valid {name}")
            span, step = match.groups()
            if step is not None and int(step) < 1:
                raise ValueError(f"invalid cron schedule {line!r}: a step must be at least 1")
            if span == "*":
                continue
            bounds = [_value(v, names) for v in span.split("-")]
            if any(b is None or not low <= b <= high for b in bounds):
                raise ValueError(f"invalid cron schedule {line!r}: {part!r} is not a {name} ({low}-{high})")


def _value(text: str, names: tuple[str, ...]) -> int | None:
    if text.isdigit():
        return int(text)
    if text in names:
        return names.index(text) + (1 if len(names) == 12 else 0)
    return None

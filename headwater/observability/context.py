"""The ids a log line or an error report is about (run, source, document), for the code running now.

Set around each fleet task (workers.celery_hooks) and read by the JSON log
formatter and by Sentry's before_send; context variables keep threads and tasks apart.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

FIELDS = ("run_id", "source_id", "document", "collection", "task")
_current: contextvars.ContextVar[dict[str, str]] = contextvars.ContextVar("headwater_context", default={})


def current() -> dict[str, str]:
    """The ids bound now (a copy)."""
    return dict(_current.get())


def bind(**ids: str | None) -> contextvars.Token:
    """Add ids to the context; returns the token that `reset` takes."""
    return _current.set({**_current.get(), **{k: str(v) for k, v in ids.items() if v is not None and v != ""}})


def reset(token: contextvars.Token) -> None:
    _current.reset(token)


def clear() -> None:
    _current.set({})


@contextlib.contextmanager
def bound(**ids: str | None) -> Iterator[None]:
    token = bind(**ids)
    try:
        yield
    finally:
        reset(token)

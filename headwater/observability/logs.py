"""Logs: one JSON object a line where a machine reads them (containers), readable text on a terminal.

HEADWATER_LOG_FORMAT is `auto` (JSON unless stderr is a terminal), `json` or `text`. Each JSON
line carries the component and the run, source and document the process is working on
(headwater.observability.context), and passes through the scrubber: a secret never reaches a log.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from headwater.observability import context
from headwater.observability.scrub import Scrubber, known_secrets
from headwater.settings import Settings

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def wants_json(settings: Settings, stream: Any = None) -> bool:
    if settings.log_format == "auto":
        stream = stream or sys.stderr
        return not (hasattr(stream, "isatty") and stream.isatty())
    return settings.log_format == "json"


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, component, context ids, exception."""

    def __init__(self, component: str, scrubber: Scrubber) -> None:
        super().__init__()
        self.component = component
        self.scrubber = scrubber

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage(),
            "component": self.component, **context.current(),
        }
        for name in context.FIELDS:  # ids given explicitly: log.info(..., extra={"run_id": ...})
            if name in record.__dict__:
                line[name] = str(record.__dict__[name])
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(self.scrubber.value(line), ensure_ascii=False, default=str)


class ScrubbingTextFormatter(logging.Formatter):
    def __init__(self, scrubber: Scrubber) -> None:
        super().__init__(TEXT_FORMAT)
        self.scrubber = scrubber

    def format(self, record: logging.LogRecord) -> str:
        return self.scrubber.text(super().format(record))


def formatter(settings: Settings, component: str) -> logging.Formatter:
    scrubber = Scrubber(known_secrets(settings))
    return JsonFormatter(component, scrubber) if wants_json(settings) else ScrubbingTextFormatter(scrubber)


def configure(settings: Settings, component: str, level: int = logging.INFO) -> None:
    """The root logger of a long-running process: one stderr handler with the chosen format."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(settings, component))
    root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per Chroma request otherwise


def uvicorn_log_config(settings: Settings) -> dict[str, Any]:
    """uvicorn's loggers sent through the root handler, so its lines share the format."""
    return {"version": 1, "disable_existing_loggers": False,
            "loggers": {name: {"handlers": [], "propagate": True, "level": "INFO"}
                        for name in ("uvicorn", "uvicorn.error", "uvicorn.access")}}

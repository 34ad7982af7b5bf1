"""Error reports to Sentry (or any Sentry-compatible DSN), with secrets scrubbed before they leave.

On when HEADWATER_SENTRY_DSN is set. Events carry the release, environment and component
(serve, worker, beat) as tags, and the run, source and document being worked on
(headwater.observability.context). `before_send` runs every event and breadcrumb through
the scrubber: nothing in a report may contain a token, a webhook secret, a password in a
Redis or database URL, or an S3 key. Local variables are never attached (they may hold any of those).
"""

from __future__ import annotations

import logging
from typing import Any

from headwater.observability import context
from headwater.observability.scrub import Scrubber, known_secrets
from headwater.settings import Settings

log = logging.getLogger(__name__)


def release() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"headwater@{version('headwater')}"
    except PackageNotFoundError:  # pragma: no cover  (running from a checkout that was never installed)
        return "headwater@unknown"


def make_before_send(scrubber: Scrubber) -> Any:
    """The before_send hook: ids of the current context as tags, then every string scrubbed."""

    def before_send(event: dict[str, Any], hint: dict[str, Any] | None = None) -> dict[str, Any]:
        tags = event.setdefault("tags", {})
        if isinstance(tags, dict):
            for name, value in context.current().items():
                tags.setdefault(name, value)
        return scrubber.value(event)

    return before_send


def make_before_breadcrumb(scrubber: Scrubber) -> Any:
    def before_breadcrumb(crumb: dict[str, Any], hint: dict[str, Any] | None = None) -> dict[str, Any]:
        return scrubber.value(crumb)

    return before_breadcrumb


def init(settings: Settings, component: str) -> bool:
    """Start reporting to the configured DSN; False (and nothing imported) when none is set."""
    if settings.sentry_dsn is None or not settings.sentry_dsn.get_secret_value().strip():
        return False  # unset, or set empty (compose passes an unset variable on as "")
    import sentry_sdk
    from sentry_sdk.integrations.celery import CeleryIntegration
    from sentry_sdk.integrations.fastapi import FastApiIntegration
    from sentry_sdk.integrations.logging import LoggingIntegration
    from sentry_sdk.integrations.starlette import StarletteIntegration

    scrubber = Scrubber(known_secrets(settings))
    sentry_sdk.init(
        dsn=settings.sentry_dsn.get_secret_value(),
        release=release(),
        environment=settings.sentry_environment,
        integrations=[CeleryIntegration(monitor_beat_tasks=False), FastApiIntegration(), StarletteIntegration(),
                      LoggingIntegration(level=logging.INFO, event_level=logging.ERROR)],
        before_send=make_before_send(scrubber),
        before_breadcrumb=make_before_breadcrumb(scrubber),
        send_default_pii=False,
        include_local_variables=False,
        traces_sample_rate=settings.sentry_traces_sample_rate,
    )
    sentry_sdk.set_tag("component", component)
    log.info("error reports go to Sentry (environment %s, %s)", settings.sentry_environment, release())
    return True

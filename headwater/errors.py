"""Typed errors: retryable ones are worth trying again, permanent ones are recorded against the document."""

from __future__ import annotations


class HeadwaterError(Exception):
    """Base class for errors Headwater raises on purpose."""


class PermanentDocumentError(HeadwaterError):
    """The document itself is the problem (corrupt, unsupported, too large): retrying will not help."""


class SkippedDocument(HeadwaterError):
    """The document is deliberately not indexed (empty, a binary format we do not read); not a failure."""


class RetryableError(HeadwaterError):
    """A transient failure (network, 429/5xx, Chroma unavailable): the same work may succeed later."""


class DocumentUnchanged(HeadwaterError):
    """The source says the document is still the version already indexed (an HTTP 304): nothing to read."""


class DocumentVanished(HeadwaterError):
    """The document disappeared between listing and reading; it is treated as deleted."""


class ConfigurationError(HeadwaterError):
    """Headwater is configured in a way that cannot work; the message says what to change."""


class ChromaPathBusy(ConfigurationError):
    """Another process already writes this embedded Chroma directory."""


class ListingError(HeadwaterError):
    """A source could not be listed completely; a pass that trusted it would delete what it missed."""


class RunDataMissing(HeadwaterError, LookupError):
    """A run's record, source spec or change is gone (history trimmed, Redis emptied)."""


# Errors that say the code is wrong, not that something blinked: retrying the same step on the same
# input raises them again, so a fleet step of one document (list and finish: of one run) that meets
# one fails it at once rather than spending its retries (minutes of backoff) on it. AttributeError
# is not among them: kombu raises it for a broker connection that went away
# (workers.broker_transport), which is transient.
PROGRAMMING_ERRORS: tuple[type[Exception], ...] = (TypeError, NameError, AssertionError, NotImplementedError)

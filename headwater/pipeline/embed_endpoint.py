"""Dense embeddings from an OpenAI-compatible `/v1/embeddings` endpoint (TEI, vLLM, Infinity, Ollama,
llama.cpp's server, a hosted API) instead of a model in this process.

The embedder is I/O-bound: it loads no model, splits texts into requests of `batch_size`, and keeps
at most `concurrency` requests in flight per process (one executor shared by every caller, so the
embedded engine's lanes and a threaded worker's tasks share one bound). Each request is retried
with exponential backoff that honours `Retry-After` on timeouts, dropped connections, 408/409/425/429
and 5xx answers; any other 4xx (a wrong model name, a bad key) will not get better and raises
`EndpointRejected` at once.

Inputs over the service's limit are refused before sending (`EndpointInputTooLong`), as far as
they can be counted here: a text of at most `max_input_tokens - 8` UTF-8 bytes fits any subword
tokenizer (none emits more than one token per byte, plus a few special tokens); a longer one is
counted exactly when the service model's tokenizer.json is configured. Without it, longer texts
rely on the chunker's bound (chunk_tokens word pieces of all-MiniLM-L6-v2, 256 at most), far below
the 512+ tokens of common embedding services, and a service that still refuses one answers 4xx,
which is `EndpointRejected`.

Vectors are stored as the service returns them (float32), never re-normalised: a collection
written through an endpoint holds exactly what the service computed.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

# Retry-After read as the web connector reads it: seconds or an HTTP date, capped at two minutes.
from headwater.backoff import retry_after_seconds
from headwater.errors import ConfigurationError, PermanentDocumentError, RetryableError
from headwater.store.model_match import fingerprint

log = logging.getLogger(__name__)

# Embedded once when a collection is opened; its vector's projections are the model's fingerprint.
PROBE_TEXT = "Headwater probe: the quick brown fox jumps over the lazy dog near the river bank."
# Retryable answers: the service is busy, overloaded, restarting or behind a proxy that blinked.
_RETRY_STATUSES = frozenset({408, 409, 425, 429})
_SPECIAL_TOKENS_ROOM = 8


class EndpointUnavailable(RetryableError):
    """The service did not answer, or answered 429/5xx, after every retry: the same request may succeed later."""


class EndpointRejected(ConfigurationError):
    """The service refused the request with a 4xx that retrying will not change (model name, key, input)."""


class EndpointInputTooLong(PermanentDocumentError):
    """A text is longer than the service reads; it is refused before sending."""


class _Retry(Exception):
    """One attempt failed in a way worth another; `wait` is the service's Retry-After, if it gave one."""

    def __init__(self, reason: str, wait: float | None = None) -> None:
        super().__init__(reason)
        self.wait = wait


def embeddings_url(url: str) -> str:
    """The embeddings route of a base URL (`http://host:8080/v1`) or of the route itself."""
    url = url.rstrip("/")
    return url if url.endswith("/embeddings") else url + "/embeddings"


class EndpointEmbedder:
    """Vectors from an OpenAI-compatible embeddings endpoint, one row per text, in the order given."""

    def __init__(self, url: str, model: str, *, api_key: str | None = None, dimensions: int | None = None,
                 batch_size: int = 32, concurrency: int = 4, timeout: float = 60.0, connect_timeout: float = 5.0,
                 retries: int = 8, backoff_max: float = 30.0, max_input_tokens: int | None = None,
                 tokenizer: Path | None = None) -> None:
        import httpx

        self.url = embeddings_url(url)
        self.name = model
        self.requested_dimensions = dimensions
        self._dimensions = dimensions
        self.batch_size = batch_size
        self.concurrency = concurrency
        self.retries = retries
        self.backoff_max = backoff_max
        self.max_input_tokens = max_input_tokens
        self._api_key = api_key
        self._counter = None
        if tokenizer is not None:
            from tokenizers import Tokenizer

            if not Path(tokenizer).is_file():
                raise ConfigurationError(f"HEADWATER_DENSE_ENDPOINT_TOKENIZER: no tokenizer.json at {tokenizer}")
            self._counter = Tokenizer.from_file(str(tokenizer))
            self._counter.no_truncation()  # count every token, and only real ones
            self._counter.no_padding()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # Enough pooled connections for every request in flight; the key only ever travels in this header.
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout, connect=connect_timeout), headers=headers,
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency))
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="headwater-endpoint")
        self._lock = threading.Lock()
        self.texts_embedded = 0
        self.requests_sent = 0

    @property
    def dimensions(self) -> int:
        """The vector size: configured, else learnt from the service's first answer (the probe)."""
        if self._dimensions is None:
            self.probe()
        return self._dimensions  # type: ignore[return-value]

    def probe(self) -> np.ndarray:
        """The probe text's vector (it also fixes the vector size when none was configured)."""
        return self.embed([PROBE_TEXT])[0]

    def identity(self) -> str:
        """endpoint:<model>/<dimensions>@<fingerprint of the probe text's vector>."""
        vector = self.probe()
        return f"endpoint:{self.name}/{vector.shape[0]}@{fingerprint(vector)}"

    def embed(self, texts: list[str]) -> np.ndarray:
        """Float32 vectors as the service returns them, one row per text, in the order given."""
        if not texts:
            return np.zeros((0, self._dimensions or 0), dtype=np.float32)
        self.check_lengths(texts)
        batches = [texts[i:i + self.batch_size] for i in range(0, len(texts), self.batch_size)]
        rows = [row for part in self._pool.map(self._request, batches) for row in part]
        out = np.asarray(rows, dtype=np.float32)
        with self._lock:
            self.texts_embedded += len(texts)
        return out

    def too_long(self, text: str) -> str | None:
        """Why the service cannot read `text` whole (None when it can, or when that cannot be known here)."""
        if self.max_input_tokens is None:
            return None
        size = len(text.encode("utf-8"))
        if size + _SPECIAL_TOKENS_ROOM <= self.max_input_tokens or self._counter is None:
            return None
        tokens = len(self._counter.encode(text).ids)
        if tokens <= self.max_input_tokens:
            return None
        return (f"a chunk of {tokens} tokens is over the embedding service's limit of {self.max_input_tokens} "
                f"(HEADWATER_DENSE_ENDPOINT_MAX_INPUT_TOKENS); lower HEADWATER_CHUNK_TOKENS, or raise the limit "
                f"if the service reads more")

    def check_lengths(self, texts: list[str]) -> None:
        """Refuse, before anything is sent, a batch holding a text the service cannot read whole."""
        for text in texts:
            reason = self.too_long(text)
            if reason:
                raise EndpointInputTooLong(f"{reason} (text starting {text[:60]!r})")

    def _request(self, batch: list[str]) -> list[list[float]]:
        from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt

        retrying = Retrying(retry=retry_if_exception_type(_Retry), stop=stop_after_attempt(self.retries + 1),
                            wait=self._wait, before_sleep=self._log_retry, reraise=False)
        try:
            return retrying(self._send, batch)
        except RetryError as exc:
            last = exc.last_attempt.exception()
            raise EndpointUnavailable(f"the embedding service at {self.url} failed {self.retries + 1} times "
                                      f"(last: {last}); check that it is up, or lower the request rate "
                                      "(HEADWATER_DENSE_ENDPOINT_CONCURRENCY)") from None

    def _wait(self, state: Any) -> float:
        """The service's Retry-After when it gave one, else exponential backoff with equal jitter."""
        import random

        failure = state.outcome.exception()
        if isinstance(failure, _Retry) and failure.wait is not None:
            return failure.wait
        step = min(self.backoff_max, 0.5 * 2.0 ** (state.attempt_number - 1))
        return step / 2 + random.uniform(0, step / 2)

    def _log_retry(self, state: Any) -> None:
        log.warning("embedding request to %s failed (%s); attempt %d of %d", self.url, state.outcome.exception(),
                    state.attempt_number, self.retries + 1)

    def _send(self, batch: list[str]) -> list[list[float]]:
        import httpx

        body: dict[str, Any] = {"model": self.name, "input": batch}
        if self.requested_dimensions:
            body["dimensions"] = self.requested_dimensions
        try:
            response = self._client.post(self.url, json=body)
        except httpx.TransportError as exc:  # timeouts and refused connections included
            raise _Retry(f"{type(exc).__name__}") from None
        with self._lock:
            self.requests_sent += 1
        status = response.status_code
        if status in _RETRY_STATUSES or status >= 500:
            raise _Retry(f"HTTP {status}", retry_after_seconds(response.headers.get("retry-after")))
        if status >= 400:
            raise EndpointRejected(f"the embedding service at {self.url} refused model {self.name!r} "
                                   f"(HTTP {status}: {self._scrub(response.text[:300])}); check "
                                   "HEADWATER_DENSE_ENDPOINT_MODEL and the key named by HEADWATER_DENSE_ENDPOINT_API_KEY_ENV")
        return self._vectors(response, len(batch))

    def _vectors(self, response: Any, expected: int) -> list[list[float]]:
        try:
            data = sorted(response.json()["data"], key=lambda item: item["index"])
            rows = [item["embedding"] for item in data]
        except (ValueError, KeyError, TypeError) as exc:
            raise _Retry(f"an unreadable answer ({type(exc).__name__})") from None
        if len(rows) != expected or any(not isinstance(row, list) for row in rows):
            raise EndpointRejected(f"the embedding service at {self.url} answered {len(rows)} float vectors for "
                                   f"{expected} texts; it must speak OpenAI's /v1/embeddings with float encoding")
        sizes = {len(row) for row in rows}
        with self._lock:
            if self._dimensions is None and len(sizes) == 1:
                self._dimensions = sizes.pop()
                sizes = {self._dimensions}
        if sizes != {self._dimensions}:
            raise EndpointRejected(f"the embedding service at {self.url} answered vectors of size "
                                   f"{sorted(sizes)}, not {self._dimensions}; set HEADWATER_DENSE_ENDPOINT_DIMENSIONS "
                                   f"to what model {self.name!r} returns")
        return rows

    def _scrub(self, text: str) -> str:
        """The service's message without the key, should it echo the Authorization header back."""
        return text.replace(self._api_key, "[key]") if self._api_key else text

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self._client.close()

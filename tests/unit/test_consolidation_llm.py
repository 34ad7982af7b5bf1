"""Stage 2's plumbing against a scripted chat-completions server on loopback: schema, retries of
malformed output and transient errors, token counting and budgets, and the secret's handling."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from pydantic import SecretStr

from headwater.consolidation import text
from headwater.consolidation.decision import Decision, MalformedAnswer, Passage, decision_schema, messages, parse_decision
from headwater.consolidation.llm import OpenAICompatible, Runner

pytestmark = pytest.mark.timeout(60)

GOOD = {"decision": "supersedes", "newer": "B", "merged_text": "", "reason": "B raises the limit and is dated later."}


def _answer(handler: BaseHTTPRequestHandler, status: int, content: str) -> None:
    """Reply as an OpenAI-compatible chat endpoint does, with `content` as the assistant's message."""
    payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}],
                          "usage": {"prompt_tokens": 7, "completion_tokens": 3}}).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(payload)))
    handler.end_headers()
    handler.wfile.write(payload)


class ScriptedServer:
    """Answers each POST with the next scripted (status, content) and records what it was sent."""

    def __init__(self, script: list[tuple[int, str]]) -> None:
        self.script, self.requests = list(script), []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append((self.path, dict(self.headers), body))
                status, content = server.script.pop(0) if server.script else (200, json.dumps(GOOD))
                _answer(self, status, content)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve():
    servers = []

    def start(script):
        servers.append(ScriptedServer(script))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


QUESTION = messages(Passage("Receipts above 50 euros.", "a.md", "2023-01-01"),
                    Passage("Receipts above 25 euros.", "b.md", "2025-01-01"))


def _runner(server, **options) -> Runner:
    backend = OpenAICompatible(server.url, "tiny", SecretStr("s3cret-key"), timeout=5, concurrency=2)
    return Runner(backend, backoff=lambda attempt: 0.0, **options)


def test_a_valid_answer_is_parsed_and_counted(serve):
    server = serve([(200, json.dumps(GOOD))])
    runner = _runner(server)
    [asked] = runner.ask_all([("pair", QUESTION)])
    assert asked.decision == Decision(**GOOD) and asked.attempts == 1
    assert (runner.tokens.prompt, runner.tokens.completion, runner.tokens.calls) == (7, 3, 1)
    path, headers, body = server.requests[0]
    assert path == "/v1/chat/completions" and headers["Authorization"] == "Bearer s3cret-key"
    assert body["response_format"]["json_schema"]["schema"] == decision_schema() and body["temperature"] == 0
    assert "dated 2025-01-01" in body["messages"][1]["content"]


def test_malformed_output_is_retried_then_recorded_never_applied(serve):
    server = serve([(200, "not json"), (200, json.dumps({**GOOD, "newer": "none"})), (200, json.dumps(GOOD))])
    [asked] = _runner(server).ask_all([("pair", QUESTION)])
    assert asked.decision is not None and asked.attempts == 3

    server = serve([(200, "{\"decision\": \"maybe\"}")] * 3)
    runner = _runner(server, retries=2)
    [asked] = runner.ask_all([("pair", QUESTION)])
    assert asked.decision is None and "malformed answer" in asked.error and "gave up after 3" in asked.error
    assert runner.tokens.calls == 3  # malformed answers still cost tokens


def test_transient_errors_are_retried_and_client_errors_are_clear(serve):
    server = serve([(503, ""), (429, ""), (200, json.dumps(GOOD))])
    [asked] = _runner(server).ask_all([("pair", QUESTION)])
    assert asked.decision is not None and len(server.requests) == 3

    from headwater.errors import ConfigurationError

    server = serve([(401, "")])
    with pytest.raises(ConfigurationError) as raised:
        _runner(server).ask_all([("pair", QUESTION)])
    assert "401" in str(raised.value) and "s3cret-key" not in str(raised.value)


def test_a_token_budget_stops_new_questions(serve):
    server = serve([])
    backend = OpenAICompatible(server.url, "tiny", None, timeout=5, concurrency=1)
    runner = Runner(backend, token_budget=15, backoff=lambda attempt: 0.0)
    answers = runner.ask_all([(n, QUESTION) for n in range(4)])
    assert [a.decision is not None for a in answers] == [True, True, False, False]
    assert "token budget" in answers[2].error and runner.tokens.total == 20


def test_schema_rules_beyond_json_shape():
    with pytest.raises(MalformedAnswer, match="newer"):
        parse_decision(json.dumps({**GOOD, "newer": "none"}))
    with pytest.raises(MalformedAnswer, match="merged text"):
        parse_decision(json.dumps({**GOOD, "decision": "complementary", "newer": "none"}))
    with pytest.raises(MalformedAnswer, match="not JSON"):
        parse_decision("{")
    with pytest.raises(MalformedAnswer, match="schema"):
        parse_decision(json.dumps({**GOOD, "extra": 1}))


def test_copies_compare_without_header_case_or_punctuation():
    a = "handbook/a.md > Backups\n\nThe database is backed up, nightly!"
    b = "wiki/b.md > Ops > Backups\n\nthe DATABASE is backed up nightly."
    assert text.normalised_hash(a) == text.normalised_hash(b)
    assert text.numbers("Open 8 am to 6 pm, since 2024-05-01") == ("8", "6", "2024", "05", "01")
    assert text.body("no header here\n\nsecond paragraph") == "no header here\n\nsecond paragraph"


def test_a_retry_after_a_malformed_answer_samples_instead_of_repeating(serve):
    server = serve([(200, "nope"), (200, json.dumps(GOOD))])
    _runner(server).ask_all([("pair", QUESTION)])
    assert [body["temperature"] for _, _, body in server.requests] == [0.0, 0.4]


class HeldServer:
    """A chat-completions server that holds every request until the test lets one through, and counts
    how many are in flight at once."""

    def __init__(self) -> None:
        self.permits = threading.Semaphore(0)
        self.state = threading.Condition()
        self.arrived = self.in_flight = self.most_in_flight = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers["Content-Length"]))
                with server.state:
                    server.arrived += 1
                    server.in_flight += 1
                    server.most_in_flight = max(server.most_in_flight, server.in_flight)
                    server.state.notify_all()
                let_through = server.permits.acquire(timeout=30)  # bounded: a broken test cannot hang the server
                with server.state:
                    server.in_flight -= 1
                _answer(self, 200 if let_through else 504, json.dumps(GOOD))

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def wait_for_arrivals(self, count: int, seconds: float = 20) -> None:
        with self.state:
            if not self.state.wait_for(lambda: self.arrived >= count, timeout=seconds):
                raise AssertionError(f"{count} requests expected by now; the server saw {self.arrived}, "
                                     f"{self.in_flight} in flight")

    def close(self) -> None:
        self.permits.release(1000)  # whatever is still held is answered
        self.httpd.shutdown()
        self.httpd.server_close()


def test_concurrency_is_bounded_by_the_backends_setting():
    concurrency, questions = 3, 8
    server = HeldServer()
    try:
        backend = OpenAICompatible(server.url, "tiny", None, timeout=30, concurrency=concurrency)
        runner = Runner(backend, retries=0, backoff=lambda attempt: 0.0)
        answers: list = []
        asking = threading.Thread(target=lambda: answers.extend(runner.ask_all([(n, QUESTION) for n in range(questions)])),
                                  daemon=True)
        asking.start()
        # Let one request through at a time, each once the runner has filled every slot it may: a runner
        # that sent more than `concurrency` at once would have them all held here together.
        for released in range(questions):
            server.wait_for_arrivals(min(questions, released + concurrency))
            server.permits.release()
        asking.join(30)
        assert not asking.is_alive(), "the runner did not finish once every request was answered"
        assert [a.decision is not None for a in answers] == [True] * questions
        assert server.arrived == questions and server.most_in_flight == concurrency
    finally:
        server.close()


def test_an_endpoint_that_never_answers_times_out_as_a_recorded_failure():
    import socket

    from headwater.consolidation.llm import TransientError

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept_and_say_nothing() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    accepting = threading.Thread(target=accept_and_say_nothing, daemon=True)
    accepting.start()
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        backend = OpenAICompatible(url, "tiny", None, timeout=0.5, concurrency=1)
        with pytest.raises(TransientError, match="Timeout"):
            backend.complete(QUESTION, decision_schema())
        # Through the runner: retried, then recorded as no decision with its reason; the run goes on.
        runner = Runner(backend, retries=1, backoff=lambda attempt: 0.0)
        [asked] = runner.ask_all([("pair", QUESTION)])
        assert asked.decision is None and "Timeout" in asked.error and "gave up after 2 attempts" in asked.error
        assert runner.tokens.calls == 0  # nothing was answered, so nothing was counted
    finally:
        stop.set()
        accepting.join(5)
        for connection in held:
            connection.close()
        listener.close()

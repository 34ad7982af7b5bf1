"""Scrubbing, Sentry's before_send and the log formats, without services."""

from __future__ import annotations

import io
import json
import logging

from pydantic import SecretStr

from headwater.observability import context
from headwater.observability.logs import JsonFormatter, ScrubbingTextFormatter, wants_json
from headwater.observability.scrub import FILTERED, Scrubber, known_secrets
from headwater.observability.sentry import make_before_send
from headwater.settings import Settings

SETTINGS = Settings(redis_url=SecretStr("redis://:r3dis-pass@redis:6379/0"), admin_token=SecretStr("admin-token-123456"),
                    chroma_cloud_api_key=SecretStr("ck-cloudkey0123456789abcdefghij"))


def _scrubber(**environ: str) -> Scrubber:
    return Scrubber(known_secrets(SETTINGS, environ=environ))


def test_known_secrets_come_from_secret_settings_and_secret_named_environment_variables():
    secrets = known_secrets(SETTINGS, environ={"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG", "HOME": "/root",
                                              "HEADWATER_DATABASE_URL": "postgresql://hw:pg-pass-1@db/hw"})
    assert {"r3dis-pass", "admin-token-123456", "wJalrXUtnFEMI/K7MDENG", "pg-pass-1"} <= set(secrets)
    assert "/root" not in secrets


def test_secrets_are_cut_out_of_strings_nested_values_and_secret_named_keys():
    scrub = _scrubber()
    event = {
        "message": "cannot reach redis://:r3dis-pass@redis:6379/0 with admin-token-123456",
        "extra": {"celery-job": {"args": ["run", "postgresql://u:other-pass@db/x", "Bearer abcdefghijklmnop"]}},
        "request": {"headers": {"Authorization": "token xyz", "X-Hub-Signature-256": "sha256=" + "ab" * 32}},
        "breadcrumbs": [{"message": "key AKIAABCDEFGHIJKLMNOP and ghp_" + "x" * 36}],
        "contexts": {"s3": {"aws_secret_access_key": "anything", "bucket": "docs"}},
        "tags": {"document": "notes/author.md"},
    }
    scrubbed = json.dumps(scrub.value(event))
    for secret in ("r3dis-pass", "admin-token-123456", "other-pass", "abcdefghijklmnop", "token xyz",
                   "ab" * 32, "AKIAABCDEFGHIJKLMNOP", "x" * 36, "anything"):
        assert secret not in scrubbed
    assert "notes/author.md" in scrubbed and '"bucket": "docs"' in scrubbed  # ordinary values stay


def test_percent_encoded_secrets_are_cut_out_of_query_strings():
    from urllib.parse import urlencode

    scrub = _scrubber(AWS_SECRET_ACCESS_KEY="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    query = urlencode({"q": "admin-token-123456 wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY redis://:other-pass@h/0 "
                            "token abcdefghijklmnop", "k": "5"})
    scrubbed = scrub.text(query)
    for secret in ("admin-token-123456", "wJalrXUtnFEMI", "bPxRfiCYEXAMPLEKEY", "other-pass", "abcdefghijklmnop"):
        assert secret not in scrubbed, scrubbed
    assert "k=5" in scrubbed  # the rest of the query stays readable
    assert scrub.text("path%20with%20spaces?page=2+3") == "path%20with%20spaces?page=2+3"  # nothing secret: as is


def test_before_send_adds_the_context_ids_as_tags_and_scrubs():
    before_send = make_before_send(_scrubber())
    with context.bound(run_id="r1", source_id="docs", document="a.md"):
        event = before_send({"message": "failed with admin-token-123456", "tags": {"component": "worker"}}, {})
    assert event["tags"] == {"component": "worker", "run_id": "r1", "source_id": "docs", "document": "a.md"}
    assert event["message"] == f"failed with {FILTERED}"
    assert context.current() == {}


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord("headwater.test", logging.WARNING, __file__, 1, message, None, None)


def test_json_lines_carry_the_context_and_never_a_secret():
    formatter = JsonFormatter("worker", _scrubber())
    with context.bound(run_id="r9", document="b.md"):
        line = json.loads(formatter.format(_record("retry: chroma token admin-token-123456 refused")))
    assert line["run_id"] == "r9" and line["document"] == "b.md" and line["component"] == "worker"
    assert line["level"] == "warning" and "admin-token-123456" not in line["message"]


def test_text_is_the_default_on_a_terminal_and_json_elsewhere():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert not wants_json(Settings(), Terminal()) and wants_json(Settings(), io.StringIO())
    assert wants_json(Settings(log_format="json"), Terminal()) and not wants_json(Settings(log_format="text"))
    assert "admin-token-123456" not in ScrubbingTextFormatter(_scrubber()).format(_record("admin-token-123456"))


def test_sentry_stays_off_without_a_dsn_or_with_an_empty_one():
    from headwater.observability import sentry

    assert not sentry.init(Settings(), "worker")
    assert not sentry.init(Settings(sentry_dsn=SecretStr("")), "worker")


def test_a_task_is_tagged_with_the_ids_its_arguments_carry():
    from workers.celery_hooks import task_ids
    from headwater.observability.metrics import stage_of_task
    from headwater import queues as names

    assert task_ids(names.FETCH, ["run-1", "docs/a.md"]) == {"run_id": "run-1", "document": "docs/a.md"}
    assert task_ids(names.FINISH, ["run-1"]) == {"run_id": "run-1", "document": None}
    assert task_ids(names.FLUSH, ["handbook"]) == {"collection": "handbook"}
    assert [stage_of_task(t) for t in (names.PARSE, names.EMBED_DENSE, names.FLUSH)] == ["parse", "dense", "write"]

"""Git sources and GitHub webhooks: the parts that need no repository and no server."""

from __future__ import annotations

import hashlib
import hmac
import json
from urllib.parse import urlencode

import pytest

from connectors.base import InvalidSource, build_connector, build_connector_for_url, kind_for_url
from connectors.git import GitConnector, parse_git_url, repository_key
from headwater.errors import ConfigurationError
from headwater.http.webhooks_github import payload_of, signature_matches, signature_of
from headwater.secrets import secret_from_env


def test_signature_is_githubs_hmac_sha256_of_the_raw_body():
    body = b'{"zen": "Design for failure."}'
    expected = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert signature_of(b"s3cret", body) == expected
    assert signature_matches(b"s3cret", body, expected)
    assert not signature_matches(b"s3cret", body + b" ", expected)
    assert not signature_matches(b"other", body, expected)
    assert not signature_matches(b"s3cret", body, expected.replace("sha256=", "sha1="))
    assert not signature_matches(b"s3cret", body, "sha256=\u00e9")  # non-ASCII header: no match, no error


def test_payload_raw_json_or_form_encoded():
    payload = {"ref": "refs/heads/main", "repository": {"full_name": "o/r"}}
    assert payload_of(json.dumps(payload).encode(), "application/json") == payload
    form = urlencode({"payload": json.dumps(payload)}).encode()
    assert payload_of(form, "application/x-www-form-urlencoded") == payload
    assert payload_of(b"not json", "application/json") is None
    assert payload_of(b"[1, 2]", "application/json") is None


@pytest.mark.parametrize("url", ["https://github.com/Owner/repo.git", "https://github.com/Owner/repo",
                                 "git@github.com:Owner/repo.git", "ssh://git@github.com/Owner/repo.git",
                                 "https://token@GitHub.com/Owner/repo/"])
def test_one_repository_under_all_its_urls(url):
    assert repository_key(url) == "github.com/Owner/repo"


def test_local_repositories_compare_by_absolute_path(tmp_path):
    assert repository_key(f"file://{tmp_path}/r.git") == repository_key(str(tmp_path / "r.git")) == f"{tmp_path}/r"


def test_git_urls_on_the_command_line():
    assert parse_git_url("git+https://github.com/o/r#dev") == ("https://github.com/o/r", "dev")
    assert parse_git_url("git+file:///srv/r.git") == ("file:///srv/r.git", None)
    assert kind_for_url("git+https://github.com/o/r") == "git" and kind_for_url("git+file:///srv/r.git") == "git"
    connector = build_connector_for_url("git+https://github.com/o/r.git#dev", cache_dir="/tmp/unused")
    assert connector.source_id == "git+https://github.com/o/r.git#dev" and connector.branch == "dev"
    assert connector.repository == "o/r" and connector.web_url == "https://github.com/o/r"


def test_credentials_in_a_url_are_refused_without_echoing_them():
    with pytest.raises(ConfigurationError) as error:
        GitConnector("s", "https://x-access-token:ghp_SECRETVALUE@github.com/o/r.git", cache_dir="/tmp/unused")
    assert "ghp_SECRETVALUE" not in str(error.value) and "token_env" in str(error.value)


def test_spec_names_the_token_variable_never_its_value(monkeypatch):
    monkeypatch.setenv("HW_TEST_GIT_TOKEN", "ghp_NEVERLOGGED")
    connector = GitConnector("s", "https://github.com/o/r.git", token_env="HW_TEST_GIT_TOKEN", cache_dir="/tmp/unused")
    assert "ghp_NEVERLOGGED" not in json.dumps(connector.spec())
    env = connector._env()
    assert env["GIT_CONFIG_KEY_0"] == "http.extraHeader" and "ghp_NEVERLOGGED" not in env["GIT_CONFIG_VALUE_0"]
    assert "ghp_NEVERLOGGED" not in connector.url


def test_git_errors_never_carry_the_token_raw_or_as_the_basic_credentials_git_sends(monkeypatch):
    monkeypatch.setenv("HW_TEST_GIT_TOKEN", "ghp_NEVERLOGGED")
    connector = GitConnector("s", "https://github.com/o/r.git", token_env="HW_TEST_GIT_TOKEN", cache_dir="/tmp/unused")
    credentials = connector._env()["GIT_CONFIG_VALUE_0"].split()[-1]  # what a proxy or trace could echo
    stderr = f"warning: retrying\nerror: proxy answered 400 to 'Authorization: Basic {credentials}' for ghp_NEVERLOGGED\n"
    assert connector._scrub(stderr.encode()) == "error: proxy answered 400 to 'Authorization: Basic ***' for ***"


def test_a_secret_option_holding_a_value_is_refused_without_echoing_it(monkeypatch):
    with pytest.raises(ConfigurationError) as error:
        secret_from_env("ghp-abc/def", "git source s: token_env")
    assert "ghp-abc/def" not in str(error.value)
    monkeypatch.delenv("HW_TEST_UNSET", raising=False)
    with pytest.raises(ConfigurationError, match="HW_TEST_UNSET"):
        secret_from_env("HW_TEST_UNSET", "git source s: token_env")


def test_a_misspelt_or_missing_option_is_an_error_naming_the_known_ones():
    with pytest.raises(InvalidSource, match="options.webhook_secret: unknown option; known: .*webhook_secret_env"):
        build_connector("git", "s", url="https://github.com/o/r.git", webhook_secret="X", cache_dir="/tmp/unused")
    with pytest.raises(InvalidSource, match="options.url: required"):
        build_connector("git", "s", cache_dir="/tmp/unused")
    with pytest.raises(ConfigurationError, match="url option is missing"):
        GitConnector("s", cache_dir="/tmp/unused")

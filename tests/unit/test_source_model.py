"""The one source model: each kind's options model, the registry that validates and builds, the
Protocols that replace attribute probes, and the dashboard's form drawn from the same models."""

from __future__ import annotations

import inspect

import pytest

from connectors import InvalidSource, build_connector, build_connector_for_url, source_kind, validate_options
from connectors.base import (AcknowledgedEvents, Checkable, Closeable, Discoverer, FollowsHead, HasCursor, KeepsState,
                             Lister, Reader)
from connectors.folder import FolderConnector
from connectors.git import GitConnector
from connectors.s3 import S3Connector
from connectors.web import WebConnector
from headwater.http.source_forms import option_fields, source_from_form
from headwater.settings import Settings
from headwater.sources.model import SourceConfig, declared_sources

TOKEN = "ghp_UnitTestTokenValue0123456789"
LEAKY = f"https://x-access-token:{TOKEN}@github.com/o/r.git"


@pytest.mark.timeout(10)
@pytest.mark.parametrize("kind", ["folder", "s3", "git", "web"])
def test_each_models_defaults_are_its_connectors(kind):
    """Built from its model or called directly, a connector behaves the same."""
    entry = source_kind(kind)
    parameters = inspect.signature(entry.factory).parameters
    for name, field in entry.options.model_fields.items():
        assert name in parameters, f"{kind} option {name} is not a parameter of {entry.factory.__name__}"
        if not field.is_required():
            default = field.get_default(call_default_factory=True)
            expected = parameters[name].default
            assert (list(default) if isinstance(default, (list, tuple)) else default) == \
                   (list(expected) if isinstance(expected, (list, tuple)) else expected), (kind, name)
    extra = set(parameters) - set(entry.options.model_fields) - entry.options.runtime - {"source_id"}
    assert not extra, f"{kind}: constructor parameters that no option sets: {extra}"


@pytest.mark.timeout(10)
def test_one_bad_option_one_message_through_every_way_in(tmp_path):
    message = ("options.url: a git source's URL must not hold credentials; put the token in an environment "
               "variable and name it in the source's token_env option")
    attempts = [lambda: SourceConfig.parse({"id": "s", "kind": "git", "options": {"url": LEAKY}}),
                lambda: build_connector("git", "s", url=LEAKY, cache_dir=tmp_path),
                lambda: build_connector_for_url(f"git+{LEAKY}", cache_dir=tmp_path),
                lambda: SourceConfig.parse(source_from_form({"id": "s", "url": LEAKY, "branch": "main"}, "git"))]
    for attempt in attempts:
        with pytest.raises(InvalidSource) as refused:
            attempt()
        assert str(refused.value) == message and refused.value.fields == ["options.url"]
        assert TOKEN not in repr(refused.value.problems)


@pytest.mark.timeout(10)
def test_messages_name_the_field_and_never_echo_what_was_given(tmp_path):
    cases = {("s3", "options.bucket"): {"bucket": "Not_A_Bucket"},
             ("s3", "options.endpoint_url"): {"bucket": "reports", "endpoint_url": f"http://key:{TOKEN}@minio:9000"},
             ("git", "options.token_env"): {"url": "https://github.com/o/r", "token_env": TOKEN},
             ("git", "options.branch"): {"url": "https://github.com/o/r", "branch": "a..b"},
             ("git", "options.url"): {"url": "ext::sh -c touch% /tmp/pwned"},
             ("web", "options.start_urls"): {"start_urls": ["gopher://x"]},
             ("web", "options.max_depth"): {"start_urls": ["https://x.example/"], "max_depth": -1},
             ("folder", "options.path"): {"path": str(tmp_path / "missing")},
             ("folder", "options.token"): {"path": str(tmp_path), "token": TOKEN}}
    for (kind, field), options in cases.items():
        with pytest.raises(InvalidSource) as refused:
            validate_options(kind, options)
        assert refused.value.fields == [field], (kind, refused.value.problems)
        assert TOKEN not in str(refused.value) and "Value error" not in str(refused.value)
    with pytest.raises(InvalidSource, match="^kind: unknown source kind 'ftp'; known kinds: folder, git, s3, web$"):
        SourceConfig.parse({"id": "s", "kind": "ftp"})
    with pytest.raises(InvalidSource, match="^schedule_cron: "):
        SourceConfig.parse({"id": "s", "kind": "folder", "options": {"path": str(tmp_path)}, "schedule_cron": "x"})


@pytest.mark.timeout(10)
def test_a_source_keeps_what_was_given_normalised(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "x").mkdir()
    config = SourceConfig.parse({"id": "s", "kind": "folder", "options": {"path": str(tmp_path / "x" / ".." / "docs")}})
    assert config.options == {"path": str(tmp_path / "docs")}
    web = SourceConfig.parse({"id": "w", "kind": "web", "options": {"start_urls": "https://docs.example.com/"}})
    assert web.options == {"start_urls": ["https://docs.example.com/"]}
    git = SourceConfig.parse({"id": "g", "kind": "git", "options": {"url": "https://github.com/o/r", "token_env": "GH"}})
    assert git.secret_references() == {"token_env": "GH"}


@pytest.mark.timeout(10)
def test_settings_refuse_a_malformed_declared_source_by_name(tmp_path):
    config = tmp_path / "headwater.toml"
    config.write_text('[[sources]]\nid = "a"\nkind = "folder"\noptions = { path = "docs" }\nschedul_cron = "x"\n')
    with pytest.raises(InvalidSource, match=r"\[\[sources\]\] a: schedul_cron: unknown option; known: id, kind"):
        declared_sources(Settings(config_file=config))


@pytest.mark.timeout(10)
def test_capabilities_are_protocols(tmp_path):
    folder = build_connector("folder", "f", path=tmp_path)
    s3 = build_connector("s3", "s", bucket="reports", endpoint_url="http://127.0.0.1:9")
    git = build_connector("git", "g", url="https://github.com/o/r", cache_dir=tmp_path)
    web = build_connector("web", "w", start_urls=["https://docs.example.com/"])
    assert all(isinstance(c, Lister) and isinstance(c, Reader) for c in (folder, s3, git))
    # A website is not listed up front: its pages are found while they are fetched (one crawl decision).
    assert isinstance(web, Discoverer) and not isinstance(web, Lister)
    assert not any(isinstance(c, Discoverer) for c in (folder, s3, git))
    found = {name: {type(c).__name__ for c in (folder, s3, git, web) if isinstance(c, protocol)}
             for name, protocol in (("check", Checkable), ("acknowledged", AcknowledgedEvents), ("cursor", HasCursor),
                                    ("head", FollowsHead), ("state", KeepsState), ("close", Closeable))}
    assert found == {"check": {"S3Connector"}, "acknowledged": {"S3Connector"}, "cursor": {"GitConnector"},
                     "head": {"GitConnector"}, "state": {"WebConnector"}, "close": {"WebConnector"}}
    assert s3.event_counts() == {}
    assert {type(c) for c in (folder, s3, git, web)} == {FolderConnector, S3Connector, GitConnector, WebConnector}


@pytest.mark.timeout(10)
def test_the_form_of_a_kind_is_its_options_model():
    git = {f.name: f for f in option_fields("git", {"url": "https://github.com/o/r", "include": ["a/**", "b/**"]})}
    assert list(git) == list(source_kind("git").options.model_fields)
    assert git["url"].required and git["url"].value == "https://github.com/o/r"
    assert git["include"].input == "list" and git["include"].value == "a/**\nb/**"
    assert git["max_file_kb"].input == "number" and git["max_file_kb"].placeholder == "1024"
    web = {f.name: f for f in option_fields("web", {})}
    assert web["allow_private_addresses"].input == "bool" and not web["allow_private_addresses"].checked
    typed = {"id": "w", "start_urls": "https://a.example/\nhttps://b.example/", "allow_private_addresses": "on",
             "max_pages": "50", "user_agent": "", "schedule_cron": "0 3 * * *"}
    assert SourceConfig.parse(source_from_form(typed, "web")) == SourceConfig.parse({
        "id": "w", "kind": "web", "schedule_cron": "0 3 * * *", "options": {
            "start_urls": ["https://a.example/", "https://b.example/"], "allow_private_addresses": True, "max_pages": 50}})

"""The website connector's rules that need no server: URLs, scope and traps, addresses, extraction, options."""

from __future__ import annotations

import pytest

from connectors import build_connector, build_connector_for_url, kind_for_url
from connectors.web import WebConnector
from connectors.web_fetch import MAX_RETRY_AFTER_SECONDS
from headwater.backoff import retry_after_seconds
from connectors.web_state import MemoryCrawlState
from connectors.web_urls import (Scope, address_refusal, extract_links, normalize, query_refusal, trap_refusal)
from headwater.errors import PermanentDocumentError
from headwater.sources.model import SourceConfig


def test_urls_have_one_spelling() -> None:
    assert normalize("HTTP://Docs.Example.com:80/a/./b/../c.html?utm_source=x&b=2&a=1#part") == \
        "http://docs.example.com/a/c.html?a=1&b=2"
    assert normalize("https://docs.example.com:443/") == "https://docs.example.com/"
    assert normalize("guide/intro.html#why", "https://docs.example.com/en/index.html") == \
        "https://docs.example.com/en/guide/intro.html"
    assert normalize("mailto:someone@example.com") is None and normalize("ftp://example.com/x") is None


def test_links_and_canonical_come_out_normalised_and_nofollow_is_obeyed() -> None:
    html = (b"<html><head><base href='/docs/'><link rel='canonical' href='/docs/page.html'></head><body>"
            b"<a href='a.html#top'>a</a><a href='a.html'>again</a><a href='javascript:void(0)'>js</a>"
            b"<a href='https://other.example/x'>out</a></body></html>")
    found = extract_links(html, "https://docs.example.com/docs/page.html?session=1")
    assert found.links == ("https://docs.example.com/docs/a.html", "https://other.example/x")
    assert found.canonical == "https://docs.example.com/docs/page.html"
    nofollow = b"<html><head><meta name='robots' content='noindex, nofollow'></head><a href='/x'>x</a></html>"
    assert extract_links(nofollow, "https://docs.example.com/").links == ()


def test_scope_hosts_patterns_and_traps() -> None:
    scope = Scope(frozenset({"docs.example.com"}), include=("/guide/*",), exclude=("*/changelog/*",))
    assert scope.refusal("https://docs.example.com/guide/intro.html") is None
    assert scope.refusal("https://other.example.com/guide/intro.html") == "another host"
    assert scope.refusal("https://docs.example.com/blog/post.html") == "not matched by include"
    assert scope.refusal("https://docs.example.com/guide/changelog/1.html") == "matched by exclude"
    assert "repeats" in trap_refusal("https://d.example/a/b/a/b/a/b/a/b/")
    assert "longer than" in trap_refusal("https://d.example/" + "x" * 2100)
    assert "query parameters" in trap_refusal("https://d.example/s?" + "&".join(f"p{i}=1" for i in range(9)))
    state = MemoryCrawlState()
    assert [query_refusal(f"https://d.example/cal?day={d}", state, 3) for d in range(3)] == [None] * 3
    assert "query variants" in query_refusal("https://d.example/cal?day=4", state, 3)
    assert query_refusal("https://d.example/cal?day=1", state, 3) is None  # one already seen stays allowed
    assert query_refusal("https://d.example/other?day=4", state, 3) is None  # counted per path
    state.forget_query_variants()  # a new pass
    assert query_refusal("https://d.example/cal?day=4", state, 3) is None


@pytest.mark.parametrize("address, allowed, words", [
    ("127.0.0.1", False, "loopback"), ("::1", False, "loopback"), ("10.1.2.3", False, "private"),
    ("192.168.0.10", False, "private"), ("169.254.10.10", False, "link-local"), ("100.64.0.1", False, "shared"),
    ("::ffff:127.0.0.1", False, "loopback"), ("169.254.169.254", True, "cloud metadata"),
    ("fd00:ec2::254", True, "cloud metadata"), ("100.100.100.200", True, "cloud metadata"),
])
def test_private_and_metadata_addresses_are_refused(address: str, allowed: bool, words: str) -> None:
    assert words in address_refusal(address, allow_private=allowed)


def test_public_addresses_and_allowed_private_ones_pass() -> None:
    assert address_refusal("93.184.216.34", allow_private=False) is None
    assert address_refusal("10.1.2.3", allow_private=True) is None


def test_retry_after_is_seconds_or_a_date_and_capped() -> None:
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past: go now
    assert retry_after_seconds("100000", MAX_RETRY_AFTER_SECONDS) == 120.0
    assert retry_after_seconds("soon") is None and retry_after_seconds(None) is None


def test_a_source_that_does_not_allow_private_addresses_refuses_loopback_before_connecting() -> None:
    connector = WebConnector("intranet", "http://127.0.0.1:9/docs/", retries=0)
    from headwater.sync.crawl_pass import CrawlPass

    listed = list(CrawlPass(connector).changes())
    assert [c.uri for c in listed] == ["http://127.0.0.1:9/docs/"] and listed[0].version is None
    with pytest.raises(PermanentDocumentError, match="loopback address; set allow_private_addresses"):
        connector.stat("http://127.0.0.1:9/docs/")


def test_web_sources_by_url_by_kind_and_in_headwater_toml() -> None:
    assert kind_for_url("https://docs.example.com/") == "web" and kind_for_url("http://x/") == "web"
    connector = build_connector_for_url("https://Docs.Example.com/en/", include=["**"], exclude=[])
    assert connector.source_id == "https://docs.example.com/en/" and connector.hosts == {"docs.example.com"}
    assert connector.include == ()
    rebuilt = build_connector(**{"kind": connector.spec()["kind"], "source_id": "s", **connector.spec()["options"]})
    assert rebuilt.spec()["options"] == connector.spec()["options"]
    source = SourceConfig(id="docs", kind="web", options={"start_urls": ["https://docs.example.com/"]})
    assert source.kind == "web"
    with pytest.raises(ValueError, match="unknown source kind"):
        SourceConfig(id="x", kind="gopher")
    with pytest.raises(ValueError, match="not an http"):
        WebConnector("bad", ["docs.example.com"])


def test_main_content_keeps_structure_and_drops_navigation_and_footer() -> None:
    from headwater.pipeline.parse import parse_document

    nav = "<nav>" + "".join(f"<a href='/p{i}'>Menu entry {i}</a>" for i in range(20)) + "</nav>"
    html = (f"<html><head><title>Rotating tokens</title></head><body>{nav}<main><h1>Rotating tokens</h1>"
            "<p>Rotate the Chroma token every ninety days and record who rotated it in the ticket.</p>"
            "<h2>Steps</h2><ul><li>Create the new token.</li><li>Deploy it to every worker.</li></ul>"
            "<pre><code>headwater rotate --token NEW</code></pre>"
            "<table><tr><th>step</th><th>owner</th></tr><tr><td>deploy</td><td>ops</td></tr></table></main>"
            "<div id='cookie-banner'>We use cookies. Accept all cookies?</div>"
            "<footer>Copyright footer text, all rights reserved.</footer></body></html>").encode()
    parsed = parse_document("https://docs.example.com/tokens", html, "text/html")
    text = "\n".join(e.text for e in parsed.elements)
    assert parsed.mime_type == "text/html" and parsed.parser.startswith("trafilatura")
    assert "Rotating tokens" in [e.text for e in parsed.elements if e.is_title]
    assert "Steps" in [e.text for e in parsed.elements if e.is_title]
    assert "headwater rotate --token NEW" in text and "Deploy it to every worker." in text and "ops" in text
    assert "Menu entry" not in text and "Copyright footer" not in text and "Accept all cookies" not in text


def test_code_and_table_rows_reach_the_index_verbatim() -> None:
    from headwater.pipeline.web_content import markdown_blocks

    markdown = ("# `json` — JSON\n\nSee Lib/json/\\_\\_init\\_\\_.py for the source.\n\n- one\n- two\n\n"
                "```\n#!/usr/bin/env python\nif __name__ == \"__main__\":\n    main([section])\n```\n"
                "| option | default |\n|---|---|\n| delay | 0.5 |\n## Next\n")
    assert markdown_blocks(markdown) == [
        ("Title", "json — JSON"), ("NarrativeText", "See Lib/json/__init__.py for the source."),
        ("ListItem", "- one"), ("ListItem", "- two"),
        ("Lines", "#!/usr/bin/env python"), ("Lines", 'if __name__ == "__main__":'), ("Lines", "    main([section])"),
        ("Lines", ""), ("Lines", "| option | default |"), ("Lines", "|---|---|"), ("Lines", "| delay | 0.5 |"),
        ("Title", "Next")]


def test_watching_a_web_source_says_to_recrawl_instead() -> None:
    from headwater.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="no change events"):
        WebConnector("docs", "https://docs.example.com/").watch(lambda changes: None, None)

"""Crawl discovery's decisions, which both modes call (headwater.pipeline.discovery)."""

from __future__ import annotations

from dataclasses import dataclass, field

from headwater.pipeline import discovery


@dataclass
class Page:
    url: str
    uri: str | None = None
    links: list[str] = field(default_factory=list)
    elsewhere: str | None = None
    kind: str = "page"
    version: str | None = "v1"
    reason: str = ""
    broken: bool = False


def test_seeds_are_the_start_urls_then_the_sitemap_pages_each_once():
    assert discovery.seeds(["https://a/"], ["https://a/x", "https://a/", "https://a/x"]) == ["https://a/", "https://a/x"]


def test_a_page_leads_to_its_links_one_further_and_a_redirect_to_its_target_at_its_own_depth():
    assert discovery.candidates(Page("https://a/", links=["https://a/1", "https://a/1", "https://a/2"]), 0) == [
        ("https://a/1", 1), ("https://a/2", 1)]
    redirect = Page("https://a/old", uri="https://a/new", elsewhere="https://a/new", links=["https://a/1"])
    assert discovery.candidates(redirect, 2) == [("https://a/new", 2), ("https://a/1", 3)]


def test_a_page_with_another_canonical_url_leads_only_there():
    copy = Page("https://a/p?ref=x", uri="https://a/p?ref=x", elsewhere="https://a/p", links=["https://a/1"])
    assert discovery.candidates(copy, 1) == [("https://a/p", 1)]


def test_admit_refuses_what_is_too_deep_or_out_of_scope():
    def in_scope(url):
        return None if url.startswith("https://a/") else "another host"

    assert discovery.admit("https://a/x", 2, 2, in_scope) is None
    assert discovery.admit("https://a/x", 3, 2, in_scope) == discovery.TOO_DEEP
    assert discovery.admit("https://b/x", 1, 2, in_scope) == "another host"


def test_the_frontier_takes_each_url_once_and_at_most_max_pages():
    frontier = discovery.Frontier(2)
    assert frontier.take("https://a/", 0) and not frontier.take("https://a/", 0)
    assert frontier.take("https://a/new", 0, visit=False)  # counted, not queued: its content is in hand
    assert not frontier.truncated
    assert not frontier.take("https://a/3", 1) and frontier.truncated
    assert list(frontier.queue) == [("https://a/", 0)]


def test_unreached_pages_are_deleted_only_after_a_complete_crawl():
    unreached = ["https://a/old", "https://a/404"]
    assert discovery.deletions(unreached, ["https://a/404"], complete=True) == unreached
    assert discovery.deletions(unreached, ["https://a/404"], complete=False) == ["https://a/404"]

"""The web connector's HTTP rules against a real loopback server: retries, Retry-After, redirect and size limits."""

from __future__ import annotations

import pytest

from connectors.web_fetch import FetchFailed, FetchPolicy, Fetcher, ResponseTooLarge, Validators
from connectors.web_urls import RefusedAddress
from tests.web_site import Site, serve

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def site():
    with serve(Site()) as running:
        running.page("/page.html", "<html><body><p>hello</p></body></html>")
        yield running


def fetcher(**policy) -> Fetcher:
    return Fetcher(FetchPolicy(**{"allow_private_addresses": True, "timeout_seconds": 2.0, "retries": 2,
                                  "backoff_seconds": 0.05, **policy}))


def test_a_503_with_retry_after_is_retried_after_the_time_it_asks_for(site: Site) -> None:
    site.fail_next("/page.html", 503, headers={"Retry-After": "1"})
    response = fetcher().get(site.url("/page.html"))
    assert response.status == 200
    first, second = site.requests("/page.html")
    assert (first.status, second.status) == (503, 200)
    assert second.at - first.at >= 0.95


def test_5xx_retries_end_in_a_failure_that_names_the_status(site: Site) -> None:
    site.fail_next("/page.html", 502, times=5)
    with pytest.raises(FetchFailed, match="HTTP 502 after 3 attempts"):
        fetcher().get(site.url("/page.html"))
    assert len(site.requests("/page.html")) == 3


def test_a_timeout_is_retried_then_reported(site: Site) -> None:
    site.delay("/page.html", 1.5)
    with pytest.raises(FetchFailed, match="timed out after 2 attempts"):
        fetcher(timeout_seconds=0.3, retries=1).get(site.url("/page.html"))


def test_redirects_are_bounded_and_a_hop_to_the_metadata_address_is_refused(site: Site) -> None:
    for n in range(4):
        site.redirect(f"/r{n}", f"/r{n + 1}")
    site.page("/r4", "<p>end</p>")
    assert fetcher(max_redirects=4).get(site.url("/r0")).redirects == [site.url(f"/r{n}") for n in range(4)]
    with pytest.raises(FetchFailed, match="more than 3 redirects"):
        fetcher(max_redirects=3).get(site.url("/r0"))
    site.redirect("/meta", "http://169.254.169.254/latest/meta-data/iam/", 302)
    with pytest.raises(RefusedAddress, match="cloud metadata address"):
        fetcher().get(site.url("/meta"))


def test_a_response_over_the_size_limit_is_refused(site: Site) -> None:
    site.page("/big.html", b"x" * 200_000)
    with pytest.raises(ResponseTooLarge, match="above the"):
        fetcher(max_bytes=100_000).get(site.url("/big.html"))


def test_a_conditional_request_is_answered_304(site: Site) -> None:
    got = fetcher().get(site.url("/page.html"))
    etag = got.headers["etag"]
    again = fetcher().get(site.url("/page.html"), lambda url: Validators(etag=etag))
    assert again.status == 304 and again.body == b""
    assert site.requests("/page.html")[-1].conditional


def test_loopback_is_refused_without_allow_private_addresses_and_nothing_is_sent(site: Site) -> None:
    with pytest.raises(RefusedAddress, match="loopback address"):
        fetcher(allow_private_addresses=False).get(site.url("/page.html"))
    with pytest.raises(RefusedAddress, match=r"localhost resolves to .*loopback"):
        fetcher(allow_private_addresses=False).get(f"http://localhost:{site.port}/page.html")
    assert site.requests() == []


def test_a_429_slows_every_later_request_to_the_host_not_only_its_retry(site: Site) -> None:
    site.page("/other.html", "<html><body><p>other</p></body></html>")
    site.fail_next("/page.html", 429, headers={"Retry-After": "1"})
    polite = fetcher()  # a start delay of 0: only the server's answer can slow it down
    assert polite.get(site.url("/page.html")).status == 200
    assert polite.get(site.url("/other.html")).status == 200
    refused, retried = site.requests("/page.html")
    other, = site.requests("/other.html")
    assert retried.at - refused.at >= 0.95
    # The host asked for a second between requests; one good answer halves that, no more.
    assert other.at - retried.at >= 0.4


def test_a_fast_host_brings_the_delay_down_from_delay_seconds(site: Site) -> None:
    from connectors.web import WebConnector

    links = "".join(f"<a href='/p{n}.html'>page {n}</a>" for n in range(12))
    site.page("/", f"<html><body><main><p>Index of the pages.</p>{links}</main></body></html>")
    for n in range(12):
        site.page(f"/p{n}.html", f"<html><body><main><p>Page number {n} of the site.</p></main></body></html>")
    connector = WebConnector("fast", [site.url("/")], allow_private_addresses=True)  # delay_seconds 0.5
    try:
        from headwater.sync.crawl_pass import CrawlPass

        assert len(list(CrawlPass(connector).changes())) == 13
        host = f"127.0.0.1:{site.port}"
        # Started at 0.5 s, moved toward the loopback server's latency with each answer.
        assert connector.pacer.delay(host) < 0.1
        gaps = [b.at - a.at for a, b in zip(site.requests(), site.requests()[1:])]
        assert gaps[0] >= 0.2  # the first requests keep near delay_seconds (halved by robots.txt's answer)
    finally:
        connector.close()

"""Embedded mode's crawl executor: the discovery decisions (headwater.pipeline.discovery) run breadth
first in this process, as a full pass's listing.

Pages are fetched by the connector (`Discoverer.visit`, a few at once), which keeps what each visit
found for the pass, so the pipeline reads a changed page without fetching it again and an
unchanged one (304) not at all. The fleet executes the same decisions across its fetch workers.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from connectors.base import Discoverer, Found
from headwater.models import DocumentChange, Op, time_sequence
from headwater.pipeline import discovery


class CrawlPass:
    """One crawl of a Discoverer: iterate `changes()` for the listing; then `complete` and `gone` say
    what the pages it did not list mean (discovery.deletions)."""

    def __init__(self, connector: Discoverer) -> None:
        self.connector = connector
        self.frontier = discovery.Frontier(connector.max_pages)
        self.gone: set[str] = set()  # answered 404/410 after they had been fetched before
        self.finished = False

    @property
    def complete(self) -> bool:
        """Whether the crawl saw the whole site (it ran to its end, and max_pages left nothing out)."""
        return self.finished and not self.frontier.truncated

    def _offer(self, url: str, depth: int) -> None:
        c = self.connector
        if url in self.frontier.seen:
            return
        refusal = discovery.admit(url, depth, c.max_depth, c.refusal)
        if refusal is None:
            self.frontier.take(url, depth)
        elif refusal != discovery.ANOTHER_HOST:
            c.refused[url] = refusal

    def changes(self) -> Iterator[DocumentChange]:
        """Every URL the crawl fetched, as a listing: pages with their versions, failures without one."""
        c = self.connector
        for url in discovery.seeds(*c.seed_urls()):
            self._offer(url, 0)
        workers = max(1, c.parallel_fetches)
        pending: dict[Future, int] = {}
        with ThreadPoolExecutor(workers, thread_name_prefix="headwater-crawl") as pool:
            try:
                while self.frontier.queue or pending:
                    while self.frontier.queue and len(pending) < workers:
                        url, depth = self.frontier.queue.popleft()
                        pending[pool.submit(c.visit, url)] = depth
                    done, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for future in done:
                        depth = pending.pop(future)
                        yield from self._listed(future.result(), depth)
            finally:
                for future in pending:
                    future.cancel()
        c.crawled(self.frontier.seen)
        self.finished = True

    def _listed(self, found: Found, depth: int) -> Iterator[DocumentChange]:
        if found.kind == "skipped":  # fetched, and not a document (an image): listed, so the report says why
            yield from self._change(found, found.url)
            return
        if found.kind == "gone" and not found.broken:
            self.gone.add(found.uri or found.url)
            return  # left out of the listing: the pass deletes what was indexed of it
        if found.uri and found.uri != found.url:
            # A redirect: its target's content is in hand, so the target is listed now, not fetched again.
            if not self.frontier.take(found.uri, depth, visit=False):
                yield from self._change(found, found.url)
                return
            yield from self._change(found, found.url)
            yield from self._change(found, found.uri)
        else:
            yield from self._change(found, found.url)
        for url, at in discovery.candidates(found, depth):
            self._offer(url, at)

    def _change(self, found: Found, uri: str) -> Iterator[DocumentChange]:
        version = None if found.kind in ("failed", "gone") or uri != (found.uri or found.url) \
            else found.version
        yield DocumentChange(self.connector.source_id, uri, Op.UPSERT, version=version, sequence=time_sequence())

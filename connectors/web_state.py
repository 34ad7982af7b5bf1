"""What a crawl remembers between passes: each page's validators, version, links and fetch time.

Validators make a recrawl cheap (a conditional request answered 304 costs no body, no parse and
no embedding); the links let a crawl go on through a page that answered 304 or could not be
loaded this time, so the pages behind it are neither missed nor mistaken for deleted. The state
is a cache: losing it costs full downloads on the next pass (content hashes still spare the
models), never an indexed page.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass
class PageRecord:
    version: str
    etag: str | None = None
    last_modified: str | None = None
    links: list[str] = field(default_factory=list)
    mime_type: str | None = None
    # When the response behind this version was received (ISO 8601, UTC): chunks carry it as `fetched_at`.
    fetched_at: str | None = None
    # The sitemap's lastmod of the page (epoch seconds) when this version was fetched: a pass whose
    # sitemap gives no newer one does not ask for the page (connectors.web_politeness).
    lastmod: float | None = None

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> PageRecord:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


class CrawlState(Protocol):
    """Per-source page records; `get`/`put`/`drop` may be called from several threads."""

    def get(self, url: str) -> PageRecord | None: ...

    def put(self, url: str, record: PageRecord) -> None: ...

    def drop(self, url: str) -> None: ...

    def save(self) -> None: ...

    def get_robots(self, host: str) -> str | None: ...

    def put_robots(self, host: str, text: str) -> None: ...

    def set_lastmods(self, lastmods: dict[str, float]) -> None:
        """The lastmod (epoch seconds) of each page the sitemaps list, replacing those of the last listing."""

    def get_lastmod(self, url: str) -> float | None: ...

    def take_query_variant(self, path: str, query: str, limit: int) -> bool:
        """Whether `query` is one of the first `limit` distinct query strings of `path` this pass (it is counted)."""

    def forget_query_variants(self) -> None:
        """A pass starts: query strings count from zero again."""


class MemoryCrawlState:
    """State that lives as long as the connector (one pass): no conditional requests across passes."""

    def __init__(self, records: dict[str, PageRecord] | None = None) -> None:
        self._records = dict(records or {})
        self._robots: dict[str, str] = {}  # read once per pass, never kept across passes
        self._lastmods: dict[str, float] = {}  # the sitemaps' lastmod of this pass, never kept across passes
        self._queries: dict[str, set[str]] = {}  # distinct query strings per path this pass
        self._lock = threading.Lock()

    def get_robots(self, host: str) -> str | None:
        return self._robots.get(host)

    def put_robots(self, host: str, text: str) -> None:
        self._robots[host] = text

    def set_lastmods(self, lastmods: dict[str, float]) -> None:
        with self._lock:
            self._lastmods = dict(lastmods)

    def get_lastmod(self, url: str) -> float | None:
        with self._lock:
            return self._lastmods.get(url)

    def take_query_variant(self, path: str, query: str, limit: int) -> bool:
        with self._lock:
            variants = self._queries.setdefault(path, set())
            if query in variants or len(variants) < limit:
                variants.add(query)
                return True
            return False

    def forget_query_variants(self) -> None:
        with self._lock:
            self._queries = {}

    def get(self, url: str) -> PageRecord | None:
        with self._lock:
            return self._records.get(url)

    def put(self, url: str, record: PageRecord) -> None:
        with self._lock:
            self._records[url] = record

    def drop(self, url: str) -> None:
        with self._lock:
            self._records.pop(url, None)

    def save(self) -> None:
        pass

    def retain(self, urls: set[str]) -> None:
        """Forget pages a pass no longer reached."""
        with self._lock:
            self._records = {u: r for u, r in self._records.items() if u in urls}

    def snapshot(self) -> dict[str, PageRecord]:
        with self._lock:
            return dict(self._records)


class FileCrawlState(MemoryCrawlState):
    """Embedded mode: one JSON file per source, written whole (via a rename) at the end of a pass."""

    def __init__(self, directory: Path, source_id: str) -> None:
        name = hashlib.sha256(source_id.encode()).hexdigest()[:24]
        self.path = Path(directory) / f"{name}.json"
        records = {}
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            records = {url: PageRecord.from_json(r) for url, r in raw.get("pages", {}).items()}
        except (FileNotFoundError, ValueError, TypeError, AttributeError):
            pass  # no state or an unreadable one: this pass downloads in full and writes a new one
        super().__init__(records)
        self.source_id = source_id

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".tmp")
        pages = {url: r.to_json() for url, r in sorted(self.snapshot().items())}
        partial.write_text(json.dumps({"source_id": self.source_id, "pages": pages}), encoding="utf-8")
        os.replace(partial, self.path)

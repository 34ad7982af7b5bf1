"""Web pages: the main content of an HTML page as Markdown (headings, lists, tables, code kept;
navigation, footers and cookie banners dropped), by trafilatura.

trafilatura was chosen over unstructured's HTML partitioning by measurement on the Python
documentation's pages (bench/web_extraction.py; README, Web sources): it drops the navigation and
footer text that partition_html keeps on every page, keeps the code blocks, and is faster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import headwater.offline  # noqa: F401


@dataclass(frozen=True)
class MainContent:
    title: str | None
    markdown: str


def main_content(html: bytes, url: str) -> MainContent | None:
    """The page's main content as Markdown with its title, or None when no main content is found."""
    import trafilatura

    extracted = trafilatura.extract(
        html, url=url, output_format="markdown", with_metadata=True, include_tables=True,
        include_formatting=True, include_links=False, include_images=False, include_comments=False,
        favor_recall=True)
    if not extracted:
        return None
    title, markdown = _front_matter_title(extracted)
    # Documentation generators end headings with a permalink sign; it is noise in every chunk header.
    markdown = _PERMALINK.sub("", markdown)
    if not markdown.strip():
        return None
    if title and not markdown.lstrip().startswith("#"):
        markdown = f"# {title}\n\n{markdown}"  # the title heads the page's chunks
    return MainContent(title=title, markdown=markdown)


_PERMALINK = re.compile(r"[\u00b6\uf0c1]$", re.M)


def _front_matter_title(text: str) -> tuple[str | None, str]:
    """trafilatura's metadata block (--- ... ---) off the Markdown, keeping the title."""
    if not text.startswith("---\n"):
        return None, text
    end = text.find("\n---\n", 4)
    if end < 0:
        return None, text
    title = None
    for line in text[4:end].splitlines():
        if line.startswith("title:"):
            title = _PERMALINK.sub("", line[len("title:"):].strip().strip('"')).strip() or None
    return title, text[end + 5:]

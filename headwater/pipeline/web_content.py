"""Web pages: the main content of an HTML page as Markdown (headings, lists, tables, code kept;
navigation, footers and cookie banners dropped), by trafilatura.

trafilatura was chosen over unstructured's HTML partitioning by measurement on the Python
documentation's pages (bench/web_extraction.py; docs/benchmarks.md, Websites): it drops the navigation and
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


_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_ESCAPED = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|>~<])")


def markdown_blocks(markdown: str) -> list[tuple[str, str]]:
    """(kind, text) blocks of trafilatura's Markdown: Title, NarrativeText, ListItem, or Lines (one per
    line of a code block or table, kept verbatim, as the chunker keeps source lines).

    Read here rather than by a Markdown renderer: code in a page (a `#!` line, `__init__`, `[section]`)
    must reach the index as written, not as the heading, emphasis or link a renderer would make of it.
    """
    blocks: list[tuple[str, str]] = []
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            text = _ESCAPED.sub(r"\1", " ".join(line.strip() for line in paragraph)).strip()
            if text:
                blocks.append(("NarrativeText", text))
            paragraph.clear()

    fence: str | None = None
    for line in markdown.splitlines():
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
                blocks.append(("Lines", ""))  # a blank line ends the block for the chunker
            else:
                blocks.append(("Lines", line))
            continue
        opening = _FENCE.match(line)
        if opening:
            flush()
            fence = opening.group(1)
            continue
        heading = _HEADING.match(line)
        if heading:
            flush()
            blocks.append(("Title", _ESCAPED.sub(r"\1", heading.group(2)).replace("`", "").strip()))
        elif line.lstrip().startswith("|"):
            flush()
            blocks.append(("Lines", _ESCAPED.sub(r"\1", line.strip())))
        elif _LIST_ITEM.match(line):
            flush()
            blocks.append(("ListItem", _ESCAPED.sub(r"\1", line.strip())))
        elif not line.strip():
            flush()
        else:
            paragraph.append(line)
    flush()
    return [(kind, text) for kind, text in blocks if text or kind == "Lines"]

"""An HTML file's visible text, line by line, for when unstructured's HTML partitioner loses part of it.

unstructured builds its elements from a strict reading of the tree: on broken nesting (a paragraph
inside a table row, a list closed after its div) it keeps the first blocks and silently drops the rest.
lxml's HTML parser repairs the same markup the way browsers do, so its text is what a reader sees.
"""

from __future__ import annotations

import re
from collections import Counter

# Elements that start a new line in a browser; their text becomes lines of their own.
_BLOCK_TAGS = (
    "address", "article", "aside", "blockquote", "br", "caption", "dd", "div", "dl", "dt", "figcaption",
    "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav", "ol", "p",
    "pre", "section", "table", "td", "th", "title", "tr", "ul",
)
_INVISIBLE_TAGS = ("script", "style", "noscript", "template")
# On well-formed documentation pages unstructured keeps 96-100 % of the visible words (a sample of the
# PostgreSQL manual); the broken markup it mishandles keeps a third. Below this, its output is not the page.
MIN_WORD_COVERAGE = 0.8


def visible_lines(data: bytes) -> list[str]:
    """The text a browser shows, one line per block element, whitespace collapsed, blank lines dropped.

    Nothing when lxml cannot read it at all (no elements): the caller's reading stands then.
    """
    import lxml.etree
    import lxml.html

    try:
        tree = lxml.html.fromstring(data)
    except (lxml.etree.LxmlError, ValueError):
        return []
    for element in list(tree.iter(*_INVISIBLE_TAGS)):
        element.drop_tree()
    for element in tree.iter(*_BLOCK_TAGS):
        element.text = "\n" + (element.text or "")
        element.tail = "\n" + (element.tail or "")
    lines = (" ".join(line.split()) for line in tree.text_content().splitlines())
    return [line for line in lines if line]


def word_coverage(kept: str, visible: list[str]) -> float:
    """The share of the visible words (with repeats) that `kept` holds too."""
    seen = _words(" ".join(visible))
    total = sum(seen.values())
    return sum((_words(kept) & seen).values()) / total if total else 1.0


def _words(text: str) -> Counter[str]:
    return Counter(re.findall(r"\w+", text.lower()))

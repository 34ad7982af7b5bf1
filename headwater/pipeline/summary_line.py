"""The one sentence that says what a document is about, for every chunk's header to carry.

A chunk deep inside a page or a module rarely repeats what the whole is for: a question such as "which
module parses command-line options" matches the lead paragraph's chunk and misses the others. The first
sentence of a document's lead paragraph (prose: the text between its title and its first section), or of a
source file's module docstring or leading comment (code), is put into every chunk's header, bounded, so
each chunk says what it is part of. License banners are not a summary and are passed over.
"""

from __future__ import annotations

import re

from headwater.pipeline.parse import Element

# Enough for a sentence such as "Utilities for parsing command-line options"; the header cuts it to
# word pieces anyway (SUMMARY_TOKENS in headwater.pipeline.chunk), this only bounds the work on a huge first line.
MAX_SUMMARY_CHARS = 240
# A leading docstring or comment is looked for in this many first lines (after a shebang or encoding line).
LEADING_LINES = 60
# Also how the chunker splits prose into sentences.
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
_LICENSE = re.compile(r"copyright|licen[cs]e|spdx-|all rights reserved|\(c\) \d{4}", re.IGNORECASE)
_DOCSTRING_QUOTES = ('"""', "'''")
# Comment openers, longest first: Rust's `//!` inner doc comments, C-style blocks, shell/Python hashes.
_COMMENT_PREFIXES = ("//!", "///", "//", "/**", "/*", "*/", "*", "#")


def prose_summary(elements: list[Element]) -> str | None:
    """The first sentence of the lead paragraph: the first text after the title, before any section."""
    seen_title = False
    for element in elements:
        if element.is_title:
            if seen_title:
                return None  # the first section starts before any lead paragraph
            seen_title = True
            continue
        if element.text.strip():
            return _first_sentence(element.text)
    return None


def code_summary(lines: list[str]) -> str | None:
    """The first sentence of a source file's module docstring or leading comment, or None."""
    rows = [row.strip() for row in lines[:LEADING_LINES]]
    start = 0
    while start < len(rows) and (not rows[start] or rows[start].startswith("#!") or _is_encoding(rows[start])):
        start += 1
    for block in _leading_blocks(rows[start:]):
        text = " ".join(block)
        if text and not _LICENSE.search(text):
            return _first_sentence(text)
    return None


def _leading_blocks(rows: list[str]) -> list[list[str]]:
    """The file's opening comment blocks (split at blank lines) and then its docstring, in order."""
    blocks: list[list[str]] = []
    current: list[str] = []
    for index, row in enumerate(rows):
        unprefixed = row.lstrip("rRuU")  # a docstring may be a raw or unicode literal
        if unprefixed[:3] in _DOCSTRING_QUOTES:
            if current:
                blocks.append(current)
            blocks.append(_docstring(unprefixed[3:], rows[index + 1:], unprefixed[:3]))
            return blocks
        if not row:
            if current:
                blocks.append(current)
            current = []
        elif row.startswith(_COMMENT_PREFIXES) and not row.startswith(("#[", "#include", "#define", "#!")):
            current.append(_comment_text(row))
        else:
            break  # code starts: whatever follows is not a file summary
    if current:
        blocks.append(current)
    return blocks


def _docstring(first: str, rest: list[str], quote: str) -> list[str]:
    """The docstring's lines up to its closing quotes, without them; `first` follows the opening quotes."""
    text: list[str] = []
    for row in [first, *rest]:
        if quote in row:
            text.append(row.split(quote, 1)[0])
            break
        text.append(row)
    return text


def _comment_text(row: str) -> str:
    for prefix in _COMMENT_PREFIXES:
        if row.startswith(prefix):
            row = row[len(prefix):]
            break
    return row.removesuffix("*/").strip()


def _is_encoding(row: str) -> bool:
    return row.startswith("#") and "coding" in row[:40]


def _first_sentence(text: str) -> str | None:
    flat = " ".join(text.split())[:MAX_SUMMARY_CHARS]
    sentence = SENTENCE_END.split(flat, maxsplit=1)[0].strip()
    return sentence or None

"""Chunk stage: a parsed document to chunks that fill the dense model's window and say where they live.

Every chunk's text is what the models embed and what the collection stores: a one-line context
header (the document's path, then its title and section, or for code the symbol path such as
`Session.request`, then the document's summary sentence from headwater/pipeline/summary_line.py), a blank line,
and the chunk's own lines. Sizes are counted in the dense
model's word pieces, header and special tokens included, so no chunk is ever truncated.

Prose and plain text: sections start at titles. A section that fills a chunk has chunks of its own;
neighbouring sections too small for one share a chunk whose header names them. Within a section, small
units (sentences, or lines for text files) are packed until the next would not fit, or, once a
chunk holds `chunk_min_tokens`, after a unit that ends a paragraph or whose content hash marks it
as a boundary. Those structural and content-defined boundaries keep an edit local: after the
edited unit, chunking falls back into step instead of shifting every later chunk.

Source code (headwater/pipeline/code_chunks.py): one chunk per function, method or class where it fits,
large ones split at inner boundaries, small neighbours merged by the same packing rule.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

from headwater.models import Chunk
from headwater.settings import Settings
from headwater.pipeline.code_chunks import Piece, code_language, grammar_problem, syntax_pieces
from headwater.pipeline.parse import Element, ParsedDocument
from headwater.pipeline.summary_line import SENTENCE_END, code_summary, prose_summary
from headwater.pipeline.tokens import SPECIAL_TOKENS, TokenCounter, token_counter

# Bump when the chunking rules change: every stored document is then re-chunked by the next sync.
CHUNKER_VERSION = "5"
# On average one unit in BOUNDARY_EVERY closes a chunk early (once past the minimum).
BOUNDARY_EVERY = 4
HEADER_SEPARATOR = "\n\n"
SYMBOL_SEPARATOR = ", "
# A header never takes more than this share of the window; code reserves this much for symbol paths.
HEADER_SHARE = 4
SYMBOL_TOKENS = 24
# The document's summary sentence (headwater.pipeline.summary_line) closes every header, cut to this many word pieces.
SUMMARY_TOKENS = 24
# Words longer than the tokenizer reads (100 characters) count as one token; bound text by characters too.
MAX_CHARS_PER_TOKEN = 10


@dataclass(frozen=True)
class _Unit:
    text: str
    joiner: str  # placed between this unit and the previous one in the same chunk
    tokens: int
    ends_block: bool  # the end of a paragraph, or a blank line: a structural place to cut
    page: int | None = None
    line: int | None = None
    line_end: int | None = None
    symbols: tuple[str, ...] = ()
    whole: bool = False  # a complete definition: stands alone once it reaches the minimum


@dataclass(frozen=True)
class _Limits:
    window: int  # word pieces of the whole embedded text, special tokens included
    min_tokens: int
    overlap: int

    def body_budget(self, header_tokens: int) -> int:
        return self.window - SPECIAL_TOKENS - header_tokens


def chunker_fingerprint(settings: Settings) -> str:
    """A short id of the chunking rules and sizes: a stored document chunked otherwise is out of date."""
    counter = token_counter(settings.dense_model_dir)
    key = (f"{CHUNKER_VERSION}|{settings.chunk_tokens}|{settings.chunk_min_tokens}|"
           f"{settings.chunk_overlap_tokens}|{counter.fingerprint}")
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]


def chunk_document(parsed: ParsedDocument, uri: str, settings: Settings) -> list[Chunk]:
    """Chunks of one parsed document, each text starting with its context header; the one entry point."""
    counter = token_counter(settings.dense_model_dir)
    limits = _Limits(settings.chunk_tokens, settings.chunk_min_tokens, settings.chunk_overlap_tokens)
    fingerprint = chunker_fingerprint(settings)
    suffix = code_language(uri) if parsed.parser == "text" else None
    if suffix and not grammar_problem(suffix):  # without its grammar, code is packed as plain text
        drafts = _code_drafts(parsed.elements, uri, suffix, counter, limits)
    else:
        drafts = _text_drafts(parsed.elements, uri, counter, limits)
    return [_make_chunk(draft, n, fingerprint) for n, draft in enumerate(drafts)]


# Headers ------------------------------------------------------------------------------------------

def _header(counter: TokenCounter, limit: int, *parts: str | None) -> tuple[str, int]:
    """`path > title > section > summary`, cut to `limit` word pieces; returns the text and its size.

    The cut takes from the end, so the summary gives way first and the chunk's place in the document
    (path, title, section or symbols) is always kept.
    """
    seen: list[str] = []
    for part in parts:
        part = " ".join((part or "").split())
        if part and part not in seen:
            seen.append(part)
    text, _ = counter.cut(" > ".join(seen), limit)
    return text, counter.count(text)


def split_header(text: str, uri: str) -> tuple[str, str]:
    """(context header, body) of a chunk's text; no header ("") where the text does not start with one.

    Every header starts with its document's path, which tells a header from a first paragraph in
    chunks made without one (the old chunker's, or another tool's records).
    """
    header, separator, body = text.partition(HEADER_SEPARATOR)
    if separator and uri and header.startswith(uri):
        return header, body
    return "", text


def _bounded_summary(counter: TokenCounter, summary: str | None) -> str | None:
    return counter.cut(summary, SUMMARY_TOKENS)[0] if summary else None


# Prose and plain text ---------------------------------------------------------------------------

@dataclass(frozen=True)
class _Draft:
    """A chunk before assembly: its units, its header, the section(s) it holds and the document's title."""

    units: list[_Unit]
    header: str
    section: str | None = None
    title: str | None = None


def _text_drafts(elements: list[Element], uri: str, counter: TokenCounter, limits: _Limits) -> list[_Draft]:
    drafts: list[_Draft] = []
    title = next((e.text.strip() for e in elements if e.is_title), None)
    summary = _bounded_summary(counter, prose_summary(elements))
    header_limit = limits.window // HEADER_SHARE
    small: list[tuple[str | None, list[_Unit]]] = []  # consecutive whole sections below the minimum

    def flush_small() -> None:
        if small:
            drafts.extend(_merged_sections(small, uri, title, summary, counter, limits))
            small.clear()

    for section, section_elements in _sections(elements):
        header, header_tokens = _header(counter, header_limit, uri, title, section, summary)
        budget = limits.body_budget(header_tokens)
        units = _units(section_elements, counter, budget)
        if not any(u.text.strip() for u in units):
            continue
        if sum(u.tokens for u in units) < min(limits.min_tokens, budget - limits.overlap):
            small.append((section, units))
            continue
        flush_small()
        previous: list[_Unit] = []
        # Room for the overlap is kept free, so a chunk with its overlap still fits.
        for pieces in _pack(units, budget - limits.overlap, min(limits.min_tokens, budget - limits.overlap)):
            shown = _with_overlap(previous, pieces, limits.overlap) if previous and limits.overlap else pieces
            if any(u.text.strip() for u in pieces):  # runs of blank lines make no chunk
                drafts.append(_Draft(shown, header, section, title))
            previous = pieces
    flush_small()
    return drafts


def _merged_sections(sections: list[tuple[str | None, list[_Unit]]], uri: str, title: str | None,
                     summary: str | None, counter: TokenCounter, limits: _Limits) -> list[_Draft]:
    """Neighbouring small sections share a chunk, as small code definitions do; the header names them all.

    A section of a sentence or two (a function's one-line docstring, a short FAQ answer) alone makes
    a chunk mostly made of its header, which matches any query that shares a word with it. A group
    closes once it reaches the minimum, when the next section would not fit, or before a section
    whose title's hash marks it as a boundary, so an edit regroups at most its own and the next chunk.
    """
    header_limit = limits.window // HEADER_SHARE
    Section = tuple[str | None, list[_Unit]]
    drafts: list[_Draft] = []
    group: list[Section] = []
    group_tokens = 0
    group_header = ("", 0)  # the header of `group` as it stands, and its size

    def header_of(members: list[Section]) -> tuple[str, int]:
        names = [s for s, _ in members if s and s != title]
        return _header(counter, header_limit, uri, title, SYMBOL_SEPARATOR.join(dict.fromkeys(names)) or None,
                       summary)

    def close() -> None:
        nonlocal group_tokens
        if group:
            # Each later section starts on a new paragraph, as it did in the document.
            units = [replace(u, joiner=HEADER_SEPARATOR) if m and not n else u
                     for m, (_, members) in enumerate(group) for n, u in enumerate(members)]
            names = SYMBOL_SEPARATOR.join(dict.fromkeys(s for s, _ in group if s)) or None
            drafts.append(_Draft(units, group_header[0], names, title))
            group.clear()
            group_tokens = 0

    for section, units in sections:
        tokens = sum(u.tokens for u in units)
        header = header_of([*group, (section, units)])
        if group and ((section is not None and _is_boundary_text(section))
                      or group_tokens + tokens > limits.body_budget(header[1]) - limits.overlap):
            close()
            header = header_of([(section, units)])
        group.append((section, units))
        group_tokens += tokens
        group_header = header
        if group_tokens >= limits.min_tokens:
            close()
    close()
    return drafts


def _sections(elements: list[Element]) -> list[tuple[str | None, list[Element]]]:
    sections: list[tuple[str | None, list[Element]]] = []
    title: str | None = None
    current: list[Element] = []
    for element in elements:
        if element.is_title:
            if current:
                sections.append((title, current))
            title, current = element.text.strip(), []
        current.append(element)
    if current:
        sections.append((title, current))
    return sections


def _units(elements: list[Element], counter: TokenCounter, budget: int) -> list[_Unit]:
    """Sentences of prose elements and lines of text files, each at most `budget` tokens."""
    raw: list[tuple[str, str, bool, Element]] = []  # text, joiner, ends_block, element
    for element in elements:
        if element.kind == "Lines":
            raw.append((element.text, "\n" if raw else "", not element.text.strip(), element))
            continue
        sentences = [p for p in SENTENCE_END.split(element.text.strip()) if p]
        for n, sentence in enumerate(sentences):
            joiner = "" if not raw else ("\n\n" if n == 0 else " ")
            raw.append((sentence, joiner, n == len(sentences) - 1, element))
    counts = counter.counts([text for text, _, _, _ in raw])
    units: list[_Unit] = []
    for (text, joiner, ends_block, element), tokens in zip(raw, counts):
        line_joiner = "\n" if element.kind == "Lines" else " "
        for m, (part, part_tokens) in enumerate(_fit(text, tokens, counter, budget)):
            units.append(_Unit(part, joiner if m == 0 else line_joiner, part_tokens, ends_block, element.page,
                               element.line, element.line))
    return units


def _fit(text: str, tokens: int, counter: TokenCounter, budget: int) -> list[tuple[str, int]]:
    """A unit longer than the budget (in tokens or characters) is cut at whitespace where it can be."""
    max_chars = budget * MAX_CHARS_PER_TOKEN
    if tokens <= budget and len(text) <= max_chars:
        return [(text, tokens)]
    parts = []
    text = text.strip()
    while text:
        head, rest = counter.cut(text[:max_chars], budget)
        text = (rest + text[max_chars:]).strip()
        parts.append((head, counter.count(head)))
    return parts


def _is_boundary(unit: _Unit) -> bool:
    return _is_boundary_text(unit.text)


def _is_boundary_text(text: str) -> bool:
    """A content-defined boundary: decided by the text alone, so it stays where the text stays."""
    return zlib.crc32(text.encode("utf-8")) % BOUNDARY_EVERY == 0


def _pack(units: Sequence[_Unit], budget: int, min_tokens: int, join_tail: bool = False) -> list[list[_Unit]]:
    """Consecutive units in chunks of at most `budget` tokens, cut at structural or content-defined points.

    With `join_tail`, the short last remainder joins the chunk before it where it fits (code: a
    split function's closing `return` at the end of a file is no chunk of its own). Prose keeps a
    section's short last chunk: on the retrieval dev sets, joining it cost the docstring corpus
    0.035 of dense MRR@10.
    """
    packed: list[list[_Unit]] = []
    current: list[_Unit] = []
    length = last_length = 0  # tokens in `current`, and in the chunk packed last
    for unit in units:
        alone = unit.whole and unit.tokens >= min_tokens
        if current and (length + unit.tokens > budget or alone):
            packed.append(current)
            current, length, last_length = [], 0, length
        current.append(unit)
        length += unit.tokens
        if alone or (length >= min_tokens and (unit.ends_block or _is_boundary(unit))):
            packed.append(current)
            current, length, last_length = [], 0, length
    if current:
        # Only the last chunk changes, so an edit still stays local.
        if (join_tail and packed and length < min_tokens and last_length + length <= budget
                and not packed[-1][-1].whole):
            packed[-1] += current
        else:
            packed.append(current)
    return packed


def _with_overlap(previous: list[_Unit], pieces: list[_Unit], overlap: int) -> list[_Unit]:
    """Prefix the trailing units of the previous chunk that fit in `overlap` tokens."""
    tail: list[_Unit] = []
    used = 0
    for unit in reversed(previous[-8:]):
        if used + unit.tokens > overlap:
            break
        tail.insert(0, unit)
        used += unit.tokens
    return tail + pieces


# Source code ------------------------------------------------------------------------------------

def _code_drafts(elements: list[Element], uri: str, suffix: str, counter: TokenCounter,
                 limits: _Limits) -> list[_Draft]:
    lines = [e.text for e in elements]
    path_header, path_tokens = _header(counter, limits.window // HEADER_SHARE, uri)
    summary = _bounded_summary(counter, code_summary(lines))
    summary_tokens = counter.count(summary) + 1 if summary else 0  # the separator takes about one more
    header_limit = min(path_tokens + SYMBOL_TOKENS + summary_tokens, limits.window // HEADER_SHARE)
    budget = limits.body_budget(header_limit)
    line_tokens = counter.counts(lines)
    pieces = syntax_pieces("\n".join(lines).encode("utf-8"), suffix, line_tokens, budget)
    units = [u for piece in pieces for u in _piece_units(piece, lines, counter, budget)]
    drafts: list[_Draft] = []
    for group in _pack(units, budget, min(limits.min_tokens, budget), join_tail=True):
        if not any(u.text.strip() for u in group):
            continue
        header, _ = _header(counter, header_limit, path_header, SYMBOL_SEPARATOR.join(_symbols(group)), summary)
        drafts.append(_Draft(group, header))
    return drafts


def _symbols(units: list[_Unit]) -> list[str]:
    """The symbol paths of these units in order, leaving out a class when one of its members is named."""
    paths = list(dict.fromkeys(s for u in units for s in u.symbols))
    return [p for p in paths if not any(q.startswith(p + ".") for q in paths)]


def _piece_units(piece: Piece, lines: list[str], counter: TokenCounter, budget: int) -> list[_Unit]:
    """A syntax piece as one unit; a single line longer than the window becomes several."""
    text = "\n".join(lines[piece.start:piece.end + 1])
    ends_block = not lines[piece.end].strip() or piece.whole
    if piece.tokens <= budget and len(text) <= budget * MAX_CHARS_PER_TOKEN:
        return [_Unit(text, "\n", piece.tokens, ends_block, None, piece.start + 1, piece.end + 1,
                      piece.symbols, piece.whole)]
    return [_Unit(part, "\n", tokens, ends_block, None, piece.start + 1, piece.end + 1, piece.symbols)
            for part, tokens in _fit(text, piece.tokens, counter, budget)]


# Assembly ---------------------------------------------------------------------------------------

def _make_chunk(draft: _Draft, index: int, fingerprint: str) -> Chunk:
    units, header, section = draft.units, draft.header, draft.section
    body = _without_blank_edges(units[0].text + "".join(u.joiner + u.text for u in units[1:]))
    line_start, line_end = _line_span(units)
    pages = [u.page for u in units if u.page is not None]
    symbols = _symbols(units)
    return Chunk(
        text=f"{header}{HEADER_SEPARATOR}{body}" if header else body,
        index=index, section=section,
        page=min(pages) if pages else None, page_end=max(pages) if pages else None,
        line_start=line_start, line_end=line_end,
        symbol=SYMBOL_SEPARATOR.join(symbols) or None, chunker=fingerprint, title=draft.title,
    )


def _without_blank_edges(text: str) -> str:
    rows = text.split("\n")
    first = _blank_rows(rows)
    last = len(rows) - _blank_rows(rows[::-1])
    return "\n".join(rows[first:last])


def _blank_rows(rows: list[str]) -> int:
    """How many rows at the start are blank."""
    return next((n for n, row in enumerate(rows) if row.strip()), len(rows))


def _line_span(units: list[_Unit]) -> tuple[int | None, int | None]:
    """First and last source line of the chunk's text, blank lines at either end left out."""
    numbered = [u for u in units if u.line is not None]
    if not numbered:
        return None, None
    first = next((u for u in numbered if u.text.strip()), numbered[0])
    last = next((u for u in reversed(numbered) if u.text.strip()), numbered[-1])
    start = first.line + _blank_rows(first.text.split("\n"))  # type: ignore[operator]
    end = last.line_end - _blank_rows(last.text.split("\n")[::-1])  # type: ignore[operator]
    return start, max(start, end)

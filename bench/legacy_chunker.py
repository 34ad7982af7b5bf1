"""The character chunker Headwater used before issue 8, kept only so the benchmarks can show "before".

Chunks of at most 900 + 100 characters of overlap, cut at content-defined points once past 300
characters, with no context header. Never used by a sync outside bench/.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

from headwater.models import Chunk
from headwater.settings import Settings
from headwater.pipeline.parse import Element, ParsedDocument

SIZE, OVERLAP, MIN_SIZE = 900, 100, 300
BOUNDARY_EVERY = 4
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")


def legacy_chunk_document(parsed: ParsedDocument, uri: str, settings: Settings) -> list[Chunk]:
    """The old chunks of a document (same signature as headwater.pipeline.chunk.chunk_document)."""
    return chunk_elements(parsed.elements, SIZE, OVERLAP, MIN_SIZE)


@dataclass(frozen=True)
class _Unit:
    text: str
    joiner: str  # placed between this unit and the previous one in the same chunk
    page: int | None
    line: int | None


def chunk_elements(elements: list[Element], size: int, overlap: int, min_size: int) -> list[Chunk]:
    """Split parsed elements into chunks of at most about `size` + `overlap` characters."""
    chunks: list[Chunk] = []
    for title, units in _sections(elements, size):
        previous: list[_Unit] = []
        for pieces in _pack(units, size, min_size):
            # Overlap stays inside a section: a new title is a clean break.
            shown = _with_overlap(previous, pieces, overlap) if previous and overlap else pieces
            if any(u.text.strip() for u in pieces):  # runs of blank lines make no chunk
                chunks.append(_make_chunk(shown, title, len(chunks)))
            previous = pieces
    return chunks


def _sections(elements: list[Element], size: int) -> list[tuple[str | None, list[_Unit]]]:
    sections: list[tuple[str | None, list[_Unit]]] = []
    title: str | None = None
    units: list[_Unit] = []
    for element in elements:
        if element.is_title:
            if units:
                sections.append((title, units))
            title, units = element.text.strip(), []
        units.extend(_units(element, size, first=not units))
    if units:
        sections.append((title, units))
    return sections


def _units(element: Element, size: int, first: bool) -> list[_Unit]:
    if element.kind == "Lines":
        parts = _hard_split(element.text, size) or [""]
        return [_Unit(part, "" if first and n == 0 else "\n", element.page, element.line)
                for n, part in enumerate(parts)]
    pieces = [p for p in _SENTENCE_END.split(element.text.strip()) if p]
    units = []
    for n, piece in enumerate(pieces):
        for m, part in enumerate(_hard_split(piece, size)):
            joiner = "" if first and not units else ("\n\n" if n == 0 and m == 0 else " ")
            units.append(_Unit(part, joiner, element.page, None))
    return units


def _hard_split(text: str, size: int) -> list[str]:
    """A sentence longer than a chunk is cut at whitespace (or anywhere, if it has none)."""
    parts = []
    while len(text) > size:
        cut = text.rfind(" ", size // 2, size)
        cut = cut if cut > 0 else size
        parts.append(text[:cut].rstrip())
        text = text[cut:].lstrip()
    if text:
        parts.append(text)
    return parts


def _is_boundary(unit: _Unit) -> bool:
    return zlib.crc32(unit.text.encode("utf-8")) % BOUNDARY_EVERY == 0


def _pack(units: list[_Unit], size: int, min_size: int) -> list[list[_Unit]]:
    packed: list[list[_Unit]] = []
    current: list[_Unit] = []
    length = 0
    for unit in units:
        added = len(unit.text) + (len(unit.joiner) if current else 0)
        if current and length + added > size:
            packed.append(current)
            current, length, added = [], 0, len(unit.text)
        current.append(unit)
        length += added
        if length >= min_size and _is_boundary(unit):
            packed.append(current)
            current, length = [], 0
    if current:
        packed.append(current)
    return packed


def _with_overlap(previous: list[_Unit], pieces: list[_Unit], overlap: int) -> list[_Unit]:
    """Prefix the trailing units of the previous chunk that fit in `overlap` characters."""
    tail: list[_Unit] = []
    used = 0
    for unit in reversed(previous[-8:]):
        if used + len(unit.text) > overlap:
            break
        tail.insert(0, unit)
        used += len(unit.text) + 1
    return tail + pieces


def _make_chunk(units: list[_Unit], title: str | None, index: int) -> Chunk:
    text = units[0].text + "".join(u.joiner + u.text for u in units[1:])
    pages = [u.page for u in units if u.page is not None]
    lines = [u.line for u in units if u.line is not None]
    return Chunk(
        text=text, index=index, section=title,
        page=min(pages) if pages else None, page_end=max(pages) if pages else None,
        line_start=min(lines) if lines else None, line_end=max(lines) if lines else None,
    )

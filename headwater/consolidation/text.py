"""What two chunks are compared on: their own text, without the context header, normalised.

Every stored chunk starts with a one-line context header (path, title, section) and a blank line.
The same paragraph in a README and on a docs page differs only in that header, so comparisons
strip it: otherwise no two copies at different paths would ever hash alike.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

_WORD = re.compile(r"\w+", re.UNICODE)
_NUMBER = re.compile(r"\d+(?:[.,:/-]\d+)*")
SHINGLE_WORDS = 3


def body(text: str) -> str:
    """The chunk's own text: the header line and the blank line after it removed, when present."""
    head, sep, rest = text.partition("\n\n")
    if sep and "\n" not in head and " > " in head:
        return rest
    return text


def normalise(text: str) -> str:
    """Case, accents, punctuation and whitespace folded away: copies that differ only in those compare equal."""
    folded = unicodedata.normalize("NFKC", body(text)).casefold()
    return " ".join(_WORD.findall(folded))


def normalised_hash(text: str) -> str:
    return hashlib.sha256(normalise(text).encode("utf-8")).hexdigest()[:32]


def shingles(normalised: str, width: int = SHINGLE_WORDS) -> set[bytes]:
    """Overlapping runs of `width` words (the whole text when shorter), as bytes for MinHash."""
    words = normalised.split()
    if len(words) <= width:
        return {" ".join(words).encode("utf-8")} if words else set()
    return {" ".join(words[i:i + width]).encode("utf-8") for i in range(len(words) - width + 1)}


def numbers(text: str) -> tuple[str, ...]:
    """The numbers and dates in a text, in order.

    Two texts that differ in any of them are never settled as copies in stage 1: "30 days" against
    "45 days" is how a new version of a policy differs from the old one, and only an LLM can say
    which one holds.
    """
    return tuple(_NUMBER.findall(normalise(text)))

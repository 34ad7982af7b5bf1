"""Glob matching shared by connectors whose documents have slash-separated paths."""

from __future__ import annotations

import fnmatch


def match(path: str, pattern: str) -> bool:
    """Glob match where ** spans directories and a leading **/ also matches at the top."""
    if fnmatch.fnmatchcase(path, pattern):
        return True
    if pattern.startswith("**/") and fnmatch.fnmatchcase(path, pattern[3:]):
        return True
    return pattern == "**"


def could_match_below(directory: str, pattern: str) -> bool:
    """Whether some path under `directory` ("a/b/") could match `pattern`, judged by the pattern's literal start.

    `*` spans slashes here (fnmatch), so only the text before the first wildcard pins the directories
    a match can lie in: "docs/**/*.md" can match only under "docs/", "*.md" anywhere.
    """
    if pattern.startswith("**/"):  # also matches at the top, so anywhere
        return True
    literal = pattern[:next((n for n, c in enumerate(pattern) if c in "*?["), len(pattern))]
    return literal.startswith(directory) or directory.startswith(literal)

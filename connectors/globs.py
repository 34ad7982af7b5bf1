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

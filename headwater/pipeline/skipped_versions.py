"""Which version of each document a pass skipped (empty, binary, unsupported), so the next full pass need not read it again.

The rule is one decision (headwater.pipeline.decisions.skipped_before); where it is remembered is each
executor's: the fleet keeps it in Redis (a hash per source), embedded mode in a small JSON file
next to its Chroma directory, and a pass with neither remembers nothing (every pass reads such
documents again, which costs time, never correctness).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Protocol


class SkippedVersions(Protocol):
    def versions(self, source_id: str) -> dict[str, str]: ...
    def record(self, source_id: str, uri: str, version: str) -> None: ...
    def save(self) -> None: ...


class NoSkippedVersions:
    """Remembers nothing."""

    def versions(self, source_id: str) -> dict[str, str]:
        return {}

    def record(self, source_id: str, uri: str, version: str) -> None:
        pass

    def save(self) -> None:
        pass


class FileSkippedVersions:
    """One JSON file per source under `directory` (embedded mode: one process writes it)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._cache: dict[str, dict[str, str]] = {}
        self._dirty: set[str] = set()

    def _path(self, source_id: str) -> Path:
        return self.directory / f"{hashlib.sha256(source_id.encode()).hexdigest()[:24]}.json"

    def versions(self, source_id: str) -> dict[str, str]:
        if source_id not in self._cache:
            try:
                self._cache[source_id] = json.loads(self._path(source_id).read_text(encoding="utf-8"))
            except (FileNotFoundError, ValueError):  # none yet, or cut short: the next pass reads them again
                self._cache[source_id] = {}
        return self._cache[source_id]

    def record(self, source_id: str, uri: str, version: str) -> None:
        versions = self.versions(source_id)
        if versions.get(uri) == version:
            return
        versions[uri] = version
        self._dirty.add(source_id)

    def save(self) -> None:
        """Write what this pass recorded (once per pass, not once per document)."""
        for source_id in sorted(self._dirty):
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self._path(source_id)
            partial = path.with_suffix(".tmp")
            partial.write_text(json.dumps(self._cache[source_id]), encoding="utf-8")
            os.replace(partial, path)  # never a half-written file
        self._dirty.clear()

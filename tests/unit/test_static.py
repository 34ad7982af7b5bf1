"""Static checks that catch what only a rarely taken path would run into: names used but never defined.

A merge can keep a branch's use of a module and lose its import; such a NameError surfaces only when
that line runs (a crawl's fetch in a worker, say), where it costs retries and a failed document.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyflakes import api, messages
from pyflakes.reporter import Reporter

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("headwater", "connectors", "workers", "schedules", "bench", "tests")
# The messages that are bugs when they run, as opposed to style (unused imports, f-strings without fields).
BUGS = (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport,
        messages.DuplicateArgument, messages.ReturnOutsideFunction)


class _Collect(Reporter):
    def __init__(self) -> None:
        super().__init__(None, None)
        self.found: list[str] = []

    def flake(self, message) -> None:  # noqa: ANN001
        if isinstance(message, BUGS):
            self.found.append(str(message))

    def syntaxError(self, filename, msg, lineno, offset, text) -> None:  # noqa: ANN001, N802
        self.found.append(f"{filename}:{lineno}: {msg}")

    def unexpectedError(self, filename, msg) -> None:  # noqa: ANN001, N802
        self.found.append(f"{filename}: {msg}")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("package", PACKAGES)
def test_no_undefined_names(package: str) -> None:
    reporter = _Collect()
    for path in sorted((ROOT / package).rglob("*.py")):
        api.checkPath(str(path), reporter)
    assert not reporter.found, "\n".join(reporter.found)

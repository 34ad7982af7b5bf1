"""A benchmark's scratch directory: removed afterwards unless asked to keep it (then printed)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def scratch_directory(prefix: str, keep: bool) -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield directory
    finally:
        if keep:
            print(f"\nkept {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)

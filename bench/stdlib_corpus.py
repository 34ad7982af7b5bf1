"""Benchmark corpora: the running interpreter's standard-library packages, copied as files."""

from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path


def copy_packages(target: Path, packages: tuple[str, ...], stop_after_bytes: int | None = None) -> tuple[int, int]:
    """Copy the packages' non-empty .py files (sub-packages included), whole packages until
    `stop_after_bytes` is reached; returns (files, bytes)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = total = 0
    for package in packages:
        if stop_after_bytes is not None and total >= stop_after_bytes:
            break
        for source in sorted((stdlib / package).rglob("*.py")):
            if "__pycache__" in source.parts or not source.stat().st_size:
                continue
            destination = target / source.relative_to(stdlib)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, destination)
            files += 1
            total += source.stat().st_size
    return files, total

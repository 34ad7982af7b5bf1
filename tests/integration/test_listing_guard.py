"""Embedded mode trusts a listing only when it completed, and never empties a source by surprise."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
# Root reads any directory; without the DAC capabilities it obeys permissions like a normal user.
_DROP = "-dac_override,-dac_read_search"
AS_USER = ["setpriv", f"--bounding-set={_DROP}", f"--inh-caps={_DROP}", "--"] if os.geteuid() == 0 else []


def headwater(*args: str, cwd) -> subprocess.CompletedProcess:  # noqa: ANN001
    return subprocess.run([*AS_USER, sys.executable, "-m", "headwater.cli", *args], capture_output=True, text=True,
                          timeout=240, cwd=cwd, env={**os.environ, "COLUMNS": "200"})


def documents(cwd) -> int:  # noqa: ANN001
    status = headwater("status", "--chroma-path", "store", "--json", cwd=cwd)
    return sum(source["documents"] for source in json.loads(status.stdout).values())


def test_an_unreadable_subdirectory_or_an_emptied_root_deletes_nothing(tmp_path):
    root = tmp_path / "docs"
    (root / "team").mkdir(parents=True)
    for name in ("a.md", "b.md", "team/c.md", "team/d.md"):
        (root / name).write_text(f"# {name}\n\nNotes kept in {name} for the on-call engineer.\n")
    first = headwater("sync", str(root), "--chroma-path", "store", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    assert documents(tmp_path) == 4

    (root / "team").chmod(0)
    try:
        refused = headwater("sync", str(root), "--chroma-path", "store", cwd=tmp_path)
    finally:
        (root / "team").chmod(0o755)
    assert refused.returncode == 1 and "cannot list" in refused.stderr, refused.stderr[-2000:]
    assert documents(tmp_path) == 4

    for path in root.rglob("*.md"):
        path.unlink()
    emptied = headwater("sync", str(root), "--chroma-path", "store", cwd=tmp_path)
    assert emptied.returncode == 1 and "--allow-mass-delete" in emptied.stderr, emptied.stderr[-2000:]
    assert documents(tmp_path) == 4
    allowed = headwater("sync", str(root), "--chroma-path", "store", "--allow-mass-delete", cwd=tmp_path)
    assert allowed.returncode == 0, allowed.stderr[-2000:]
    assert documents(tmp_path) == 0

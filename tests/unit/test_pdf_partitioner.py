"""The fast PDF strategy without numba, OpenCV and matplotlib (headwater/pipeline/pdf_partitioner.py).

Each case runs in a fresh interpreter: whether the stand-ins are used is decided at the PDF
partitioner's first import, once per process. "Without" blocks the real packages with an import
hook, as if they were not installed (the quickstart); "with" uses them where this install has them
(the test install lists them in the `test` extra for this comparison).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from headwater.pipeline.pdf_partitioner import STOOD_IN, stand_ins
from tests.documents import write_pdf
from tests.real_files import debian_pdfs

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("numba", "llvmlite", "cv2", "matplotlib")

PARSE = r"""
import json, sys
heavy = tuple(sys.argv[1].split(",")) if sys.argv[1] else ()

class Absent:
    '''Makes the heavy packages look uninstalled (an import hook that refuses them).'''
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in heavy:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)

sys.meta_path.insert(0, Absent())
import numpy as np
from headwater.pipeline.parse import parse_document
from headwater.pipeline.pdf_partitioner import load_pdf_partitioner

load_pdf_partitioner()
from unstructured.partition.utils import xycut

# XY-cut is what numba compiles: the same order from the compiled and the plain function.
rng = np.random.default_rng(7)
corners = rng.integers(0, 500, size=(40, 2))
boxes = np.hstack([corners, corners + rng.integers(5, 80, size=(40, 2))]).astype(np.int64)
order = []
xycut.recursive_xy_cut(boxes, np.arange(len(boxes)), order)
out = {"xycut": [int(i) for i in order], "njit": f"{xycut.njit.__module__}.{xycut.njit.__name__}",
       "left_in_sys_modules": sorted({m.split('.')[0] for m in sys.modules} & set(heavy)), "pdfs": {}}
for path in sys.argv[2:]:
    doc = parse_document(path.rsplit("/", 1)[-1], open(path, "rb").read())
    out["pdfs"][path] = [[e.kind, e.text, e.page] for e in doc.elements]
print(json.dumps(out))
"""


def _parse(pdfs: list[Path], absent: tuple[str, ...]) -> dict:
    done = subprocess.run([sys.executable, "-c", PARSE, ",".join(absent), *map(str, pdfs)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def pdfs(tmp_path_factory) -> list[Path]:
    written = write_pdf(tmp_path_factory.mktemp("pdf") / "report.pdf",
                        [["Sync throughput report", "Headwater indexed the folder in one pass."],
                         ["Deletes", "Deleted files disappear from search results at once."]])
    return [*debian_pdfs(), written]


@pytest.fixture(scope="module")
def without_heavy(pdfs) -> dict:
    return _parse(pdfs, HEAVY)


def test_the_fast_strategy_reads_pdfs_with_the_stand_ins(without_heavy, pdfs):
    assert without_heavy["njit"] == "headwater.pipeline.pdf_partitioner._njit"
    for pdf in pdfs:
        elements = without_heavy["pdfs"][str(pdf)]
        assert elements and any(text.strip() for _, text, _ in elements), f"{pdf}: no text without the heavy modules"
    assert any("Sync throughput report" in text for _, text, _ in without_heavy["pdfs"][str(pdfs[-1])])
    # The stand-ins are gone after the import: later importers get the real package or a real ImportError.
    assert without_heavy["left_in_sys_modules"] == []


def test_same_elements_with_and_without_the_heavy_modules(without_heavy, pdfs):
    absent = [name for name in ("numba", "cv2", "matplotlib") if not _importable(name)]
    if absent:
        pytest.skip(f"{', '.join(absent)} not installed here (the test install has them): nothing to compare with")
    with_heavy = _parse(pdfs, ())
    assert with_heavy["njit"] != without_heavy["njit"], "the real numba was not used"
    assert with_heavy["xycut"] == without_heavy["xycut"]
    for pdf in pdfs:
        assert with_heavy["pdfs"][str(pdf)] == without_heavy["pdfs"][str(pdf)], f"{pdf} parsed differently"


def _importable(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def test_a_stood_in_module_says_what_is_missing_when_used():
    # In a process of its own: the suite's other PDF tests import the real cv2 where it is installed.
    script = """
import sys
from headwater.pipeline.pdf_partitioner import stand_ins
assert "cv2" not in sys.modules
with stand_ins(["cv2"]):
    import cv2
    try:
        cv2.imread("page.png")
    except ImportError as exc:
        print("refused:", exc)
    assert not hasattr(cv2, "__version__")
assert "cv2" not in sys.modules
print("gone")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "refused:" in done.stdout and "cv2 is not installed" in done.stdout and "gone" in done.stdout, done.stdout


def test_stand_ins_never_shadow_an_imported_module():
    import json as already_imported  # noqa: F401

    with pytest.raises(RuntimeError, match="already imported"):
        with stand_ins(["json"]):
            pass
    assert sys.modules["json"] is already_imported

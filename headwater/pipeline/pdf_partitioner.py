"""unstructured's PDF partitioner, importable without numba, OpenCV and matplotlib.

The fast PDF strategy reads the text layer with pdfminer and never runs a layout model, OCR, a
drawing or a JIT-compiled function that needs numba. But the modules it lives in import three
heavy packages at import time: numba (`from numba import njit` in unstructured's XY-cut sorting,
which pulls llvmlite: ~210 MB), OpenCV (`import cv2` in the image helpers and the layout models:
~175 MB) and matplotlib (`import matplotlib.pyplot` in unstructured-inference's visualisation:
~80 MB with fontTools). The quickstart install leaves them out (pyproject's [tool.headwater.left-out]),
so for the duration of that import this module puts small stand-ins where they are missing:

- numba: `njit` returns the function unchanged. The XY-cut helpers are plain numpy-and-loops
  Python that numba merely compiles, so they compute the same result uncompiled.
- cv2 and matplotlib: empty modules whose every attribute raises ImportError naming the package.
  Only the OCR, layout-model and drawing paths touch them, never the fast strategy; if one ever
  does, the parser reports an incomplete PDF install instead of returning wrong text.

The stand-ins are removed from sys.modules right after the import, so any other code that later
imports cv2, numba or matplotlib gets the real package or a real ImportError. Where the real
packages are installed (the test install), they are used and nothing is stood in.
tests/unit/test_pdf_partitioner.py checks that a real PDF gives the same elements both ways.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import types
from collections.abc import Iterator

# The module unstructured's auto partitioner loads for PDFs; importing it imports everything the fast strategy needs.
PDF_MODULE = "unstructured.partition.pdf"
# Packages stood in for when missing, with the submodules imported from them by name.
STOOD_IN = {"numba": (), "cv2": (), "matplotlib": ("pyplot",)}


def _njit(*args, **kwargs):
    """numba.njit's two forms, `@njit` and `@njit(cache=True)`, as a decorator that changes nothing."""
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return args[0]
    return lambda function: function


class _Missing(types.ModuleType):
    """A module that is imported but never used on the fast path; using it says what is missing."""

    def __getattr__(self, name: str):
        if name.startswith("__"):  # import machinery and introspection probe dunders: behave as absent
            raise AttributeError(name)
        raise ImportError(f"{self.__name__}.{name} is needed here, and {self.__name__.split('.')[0]} is not "
                          "installed (Headwater's quickstart parses PDFs with the fast strategy only)",
                          name=self.__name__)


def _stand_in(name: str) -> types.ModuleType:
    if name == "numba":
        module = types.ModuleType(name, "Stand-in for numba: njit leaves functions uncompiled.")
        module.njit = _njit
        return module
    return _Missing(name, f"Stand-in for {name}, which the fast PDF strategy imports but never uses.")


@contextlib.contextmanager
def stand_ins(names: list[str]) -> Iterator[None]:
    """Put stand-ins for `names` (and their submodules in STOOD_IN) in sys.modules, and take them out after."""
    placed: dict[str, types.ModuleType] = {}
    for name in names:
        placed[name] = _stand_in(name)
        for sub in STOOD_IN.get(name, ()):
            placed[f"{name}.{sub}"] = child = _stand_in(f"{name}.{sub}")
            setattr(placed[name], sub, child)
    clashing = [name for name in placed if name in sys.modules]
    if clashing:
        raise RuntimeError(f"cannot stand in for modules already imported: {clashing}")
    sys.modules.update(placed)
    try:
        yield
    finally:
        for name, module in placed.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]


def _installed(name: str) -> bool:
    if name in sys.modules:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a finder that refuses the name: as good as absent
        return False


def missing_heavy_modules() -> list[str]:
    """The packages in STOOD_IN that are not installed."""
    return [name for name in STOOD_IN if not _installed(name)]


def load_pdf_partitioner() -> None:
    """Import unstructured's PDF partitioner (once per process), standing in for the heavy packages that are missing."""
    if PDF_MODULE in sys.modules:
        return
    with stand_ins(missing_heavy_modules()):
        importlib.import_module(PDF_MODULE)

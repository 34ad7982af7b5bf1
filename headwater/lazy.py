"""A model built on first use: a command that has no text to embed never pays to load one."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class Lazy:
    """Stands in for the object `factory` builds, building it (once, thread-safely) on first attribute access."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self._factory = factory
        self._built: Any = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._built is not None

    def prefetch(self) -> None:
        """Start building in a background thread, so the build overlaps whatever the caller does next.

        A build that fails there is left for the first use to repeat and report, in the caller's thread.
        """
        def build() -> None:
            try:
                self._get()
            except Exception:  # noqa: BLE001  (raised again, where it can be handled, on first use)
                pass

        # Not a daemon: a process that exits early (a mistyped path, say) waits for the build to end,
        # since exiting while a native runtime is still loading aborts the process ("terminate called
        # without an active exception") instead of exiting with the error it had.
        threading.Thread(target=build, name="headwater-prefetch", daemon=False).start()

    def _get(self) -> Any:
        with self._lock:
            if self._built is None:
                self._built = self._factory()
            return self._built

    def materialize(self) -> Any:
        """Build it now (before work that must find it already built)."""
        return self._get()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._get(), name)

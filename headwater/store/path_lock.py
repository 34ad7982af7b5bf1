"""One writer per embedded Chroma directory: two PersistentClient writers silently damage its index."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

from headwater.errors import ChromaPathBusy

LOCK_NAME = ".headwater-writer.lock"


class ChromaPathLock:
    """An exclusive, non-blocking advisory lock held for as long as a process writes the directory."""

    def __init__(self, chroma_path: Path) -> None:
        self.path = Path(chroma_path)
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise ChromaPathBusy(
                f"{self.path} is being written by another Headwater process (pid {holder}). "
                "Two writers on one embedded Chroma corrupt its index: wait for that process to "
                "finish or stop it, or use a Chroma server (fleet mode) for concurrent writers."
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode("ascii"), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> ChromaPathLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

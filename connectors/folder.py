"""Local folders: a scan for full syncs and watchdog (inotify) events for watch mode."""

from __future__ import annotations

import os
import stat as stat_module
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path, PurePosixPath

from pydantic import Field, field_validator

from connectors.base import DocumentStat, SourceOptions, register_connector
from connectors.globs import could_match_below, match as _match
from headwater.errors import ListingError
from headwater.models import DocumentChange, Op, time_sequence

KIND = "folder"
# Hidden files and directories (.git, .env, editor swap files, .headwater itself) are left out
# unless a user includes them: they are rarely documents and sometimes hold secrets.
DEFAULT_EXCLUDE = (".*", "**/.*", "**/node_modules/**", "**/__pycache__/**", "*~", "**/*~")


class FolderOptions(SourceOptions):
    """A directory on the machine that reads it (the serve process, the workers)."""

    path: str = Field(min_length=1, max_length=4096, description="A directory; stored as its absolute path.")
    include: list[str] = Field(default_factory=lambda: ["**"], max_length=100, description="Globs of files to index.")
    exclude: list[str] = Field(default_factory=lambda: list(DEFAULT_EXCLUDE), max_length=100,
                               description="Globs of files to leave out (default: hidden files, node_modules, "
                                           "__pycache__, backups).")
    debounce_seconds: float = Field(default=0.5, ge=0, le=3600,
                                    description="watch: how long a file must stay untouched before it is synced.")

    @field_validator("path", mode="before")
    @classmethod
    def _path_as_text(cls, value: object) -> object:
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @field_validator("path")
    @classmethod
    def _a_directory(cls, value: str) -> str:
        path = Path(value).expanduser()
        if not path.is_dir():
            raise ValueError(f"must be an absolute path to a directory on this machine ({value[:200]} is not one)")
        return str(path.resolve())


def file_version(st: os.stat_result) -> str:
    """The cheap fingerprint that decides whether a file needs reading at all."""
    return f"{st.st_mtime_ns}:{st.st_size}"


class FolderConnector:
    """A directory tree. URIs are POSIX paths relative to the root; links out of the root are never followed."""

    kind = KIND

    def __init__(self, source_id: str, path: str | Path, include: Sequence[str] = ("**",),
                 exclude: Sequence[str] = DEFAULT_EXCLUDE, debounce_seconds: float = 0.5) -> None:
        self.source_id = source_id
        self.root = Path(path).expanduser().resolve()
        if not self.root.is_dir():
            raise ValueError(f"{path} is not a directory")
        self.include = tuple(include)
        self.exclude = tuple(exclude)
        self.debounce_seconds = debounce_seconds

    def spec(self) -> dict:
        """What a worker needs to build the same connector (JSON)."""
        return {"kind": KIND, "id": self.source_id,
                "options": {"path": str(self.root), "include": list(self.include), "exclude": list(self.exclude)}}

    # Matching --------------------------------------------------------------------------------

    def wants(self, uri: str) -> bool:
        """Whether a relative path is part of this source according to the include/exclude globs."""
        parts = PurePosixPath(uri).parts
        if any(_match(uri, p) for p in self.exclude):
            return False
        # A directory pattern excludes what lies below it ("build/**", ".*" on a parent).
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            if any(_match(parent, p) or _match(parent + "/", p) for p in self.exclude):
                return False
        return any(_match(uri, p) for p in self.include)

    def _uri(self, path: Path) -> str | None:
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return None

    def _inside_root(self, path: Path) -> bool:
        real = Path(os.path.realpath(path))
        return real == self.root or self.root in real.parents

    # Lister ----------------------------------------------------------------------------------

    def list_documents(self) -> Iterator[DocumentChange]:
        """Every wanted file, streamed; raises ListingError if any directory cannot be read (nothing is then deleted).

        Directories are read with scandir, depth first in name order: a regular file costs one
        lstat, and only symbolic links pay for resolving where they lead.
        """
        if not self.root.is_dir():
            raise ListingError(f"{self.root} is no longer a readable directory (unmounted or removed?)")
        pending = [("", str(self.root))]  # (uri prefix, path) of directories still to read
        while pending:
            prefix, directory = pending.pop()
            try:
                with os.scandir(directory) as listing:
                    entries = sorted(listing, key=lambda e: e.name)
            except OSError as error:
                raise ListingError(f"cannot list {error.filename or directory} ({error.strerror or type(error).__name__}); "
                                   "fix its permissions or exclude it — the pass stopped so that nothing under it "
                                   "is mistaken for deleted") from error
            subdirectories = []
            for entry in entries:
                uri = prefix + entry.name
                if entry.is_dir(follow_symlinks=False):
                    if self.wants_dir(uri):
                        subdirectories.append((uri + "/", entry.path))
                elif self._wants_listed(uri):
                    change = self._change_for_entry(entry, uri)
                    if change is not None:
                        yield change
            pending.extend(reversed(subdirectories))

    def _wants_listed(self, uri: str) -> bool:
        """wants(), for a file whose directories the listing already accepted."""
        return not any(_match(uri, p) for p in self.exclude) and any(_match(uri, p) for p in self.include)

    def _change_for_entry(self, entry: os.DirEntry, uri: str) -> DocumentChange | None:
        if entry.is_symlink():  # may lead out of the root: checked the slow way
            return self._change_for(Path(entry.path), uri)
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            return None  # vanished mid-listing; a later event or scan catches up
        return self._change_from_stat(st, uri)

    def wants_dir(self, uri: str) -> bool:
        """Whether the listing enters this directory: not excluded, and an include glob could match below it.

        A directory no include can reach is never read, so an unreadable one there (a lost+found, a
        mount without permission) cannot stop the pass, and `include = ["docs/**"]` never walks the rest.
        """
        if any(_match(uri, p) or _match(uri + "/", p) for p in self.exclude):
            return False
        return any(could_match_below(uri + "/", p) for p in self.include)

    def _change_for(self, path: Path, uri: str) -> DocumentChange | None:
        try:
            st = path.stat() if self._inside_root(path) else None
        except OSError:
            return None  # vanished or unreadable link; a later event or scan catches up
        if st is None:
            return None
        return self._change_from_stat(st, uri)

    def _change_from_stat(self, st: os.stat_result, uri: str) -> DocumentChange | None:
        if not stat_module.S_ISREG(st.st_mode):
            return None
        # A file's mtime orders its changes (live changes of one uri are applied newest-last).
        return DocumentChange(self.source_id, uri, Op.UPSERT, version=file_version(st),
                              sequence=f"{st.st_mtime_ns:020d}", size=st.st_size)

    # Reader ----------------------------------------------------------------------------------

    def _path(self, uri: str) -> Path:
        path = self.root / uri
        if not self._inside_root(path):
            raise PermissionError(f"{uri} resolves outside the source root")
        return path

    def stat(self, uri: str) -> DocumentStat:
        st = self._path(uri).stat()
        if stat_module.S_ISDIR(st.st_mode):
            raise IsADirectoryError(uri)
        return DocumentStat(size=st.st_size, modified_time=st.st_mtime, version=file_version(st))

    def read(self, uri: str, limit: int) -> bytes:
        with open(self._path(uri), "rb") as handle:
            return handle.read(limit)

    # EventSource -----------------------------------------------------------------------------

    def watch(self, on_changes: Callable[[list[DocumentChange] | None], None], stop: threading.Event) -> None:
        """Block until `stop` is set, reporting debounced changes as they settle."""
        from watchdog.observers import Observer

        handler = _DebouncedHandler(self)
        observer = Observer()
        observer.schedule(handler, str(self.root), recursive=True)
        observer.start()
        # A change made after the caller's last pass but before the observer was scheduled has no event:
        # one full pass now (a stat per unchanged file) closes that gap, so nothing written at start-up is missed.
        on_changes(None)
        try:
            while not stop.wait(min(0.1, self.debounce_seconds or 0.1)):
                if handler.take_rescan():
                    on_changes(None)
                changes = handler.take_settled(self.debounce_seconds)
                if changes:
                    on_changes(changes)
        finally:
            observer.stop()
            observer.join(timeout=5)


class _DebouncedHandler:
    """Collects watchdog events per path; a path is reported once no event touched it for a while."""

    def __init__(self, connector: FolderConnector) -> None:
        self.connector = connector
        self._lock = threading.Lock()
        self._pending: dict[str, float] = {}  # uri -> time of its last event
        self._rescan = False

    def dispatch(self, event) -> None:  # watchdog calls this for every event
        kind = event.event_type
        if kind in ("opened", "closed_no_write"):
            return
        if event.is_directory:
            if kind in ("moved", "deleted"):
                with self._lock:
                    self._rescan = True  # files under it moved or went without events of their own
            return
        paths = [event.src_path] + ([event.dest_path] if kind == "moved" else [])
        now = time.monotonic()
        with self._lock:
            for raw in paths:
                uri = self.connector._uri(Path(os.fsdecode(raw)))
                if uri and self.connector.wants(uri):
                    self._pending[uri] = now

    def take_rescan(self) -> bool:
        with self._lock:
            rescan, self._rescan = self._rescan, False
            return rescan

    def take_settled(self, quiet_for: float) -> list[DocumentChange]:
        cutoff = time.monotonic() - quiet_for
        with self._lock:
            settled = [uri for uri, last in self._pending.items() if last <= cutoff]
            for uri in settled:
                del self._pending[uri]
        # The file system, not the event kind, says what happened: it exists now or it does not.
        changes = []
        for uri in sorted(settled):
            change = self.connector._change_for(self.connector.root / uri, uri)
            changes.append(change or DocumentChange(self.connector.source_id, uri, Op.DELETE,
                                                    sequence=time_sequence()))
        return changes


register_connector(KIND, FolderConnector, FolderOptions)

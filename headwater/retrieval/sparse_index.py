"""A derived inverted index over the SPLADE vectors stored in the collection's metadata.

Local and self-hosted Chroma cannot index sparse vectors, so Headwater keeps this index itself.
It is a cache of the collection: it holds nothing the collection does not, it is updated by the
same writes (no rebuild per change), and it can be rebuilt from the collection alone at any time.

Layout: rows are numbered in the order they arrive. Rows live in immutable segments, each a
term-major CSR matrix (vocabulary x rows) so a query reads only its own terms' postings. A
delete or an overwrite only clears the row's `alive` bit. On disk (one directory per collection)
each segment is one .npz written once; the manifest and the alive bitmap are replaced atomically
per pass. A DIRTY marker is present while a writer has unsaved changes: an index found dirty (a
crash, or a writer mid-pass) is rebuilt from the collection instead of trusted.

Compaction is size-tiered (headwater.retrieval.segment_tiers): a segment's tier is its size on a log scale,
and segments only ever merge at the newest end, FANOUT of one tier into one of the next, so a
pass of a few changes rewrites a few small segments, never the whole index, and every row is
rewritten about log(rows) times over its life. A segment whose rows are mostly dead is rewritten
alone. A merge writes a new file; the manifest naming it is the commit point, and the files it
no longer names are removed after it, so a crash at any moment leaves either the old or the new
set of segments whole (or a DIRTY index, which is rebuilt).

Each segment also keeps its rows' dense vectors (float32, rows x dimensions, the values Chroma
stores): a filtered dense search whose filter selects few rows ranks just those rows exactly
(headwater.retrieval.filtered_dense) instead of asking Chroma for a filtered HNSW walk. They are written,
merged, mapped and dropped with the sparse rows, so they cost no extra pass and no rebuild; a
segment holding any row whose vector was never given has none, and searches over it use Chroma.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import sparse as sp

from headwater.store import chroma_store as keys
from headwater.retrieval.locations import uri_under
from headwater.retrieval.npz_mmap import mapped_npz
from headwater.retrieval.segment_tiers import merges_due
from headwater.store.sparse_codec import decode_sparse

MANIFEST = "manifest.json"
DIRTY = "DIRTY"
# 3: segments carry their rows' dense vectors. An index saved in an older format is rebuilt once.
FORMAT_VERSION = 3
SEAL_EVERY = 20_000
LOCATION_CACHE = 32  # filters whose matching rows are remembered (each costs a byte per row)

Accept = Callable[[list[int]], list[bool]]
# Rows per block when a dense scan reads vectors: small enough to stay in the CPU cache.
SCAN_BLOCK = 4096


@dataclass
class _Segment:
    first_row: int
    matrix: sp.csr_matrix  # vocabulary x rows
    name: str | None = None  # file name once persisted
    dense: np.ndarray | None = None  # rows x dimensions, float32; None unless every row's vector is known

    @property
    def rows(self) -> int:
        return self.matrix.shape[1]


def _locked(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run a SparseIndex method holding the index's lock (re-entrant: methods call one another)."""
    @functools.wraps(method)
    def locked(self: SparseIndex, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return method(self, *args, **kwargs)
    return locked


class SparseIndex:
    """Inverted index: chunk id -> SPLADE vector, with source and uri kept for filtering."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = Path(directory) if directory else None
        self.ids: list[str] = []
        self.uris: list[str] = []
        self.sources: list[str] = []
        self.alive = np.zeros(0, dtype=bool)
        self.row_of: dict[str, int] = {}
        self._segments: list[_Segment] = []
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []  # rows not yet sealed into a segment
        self._pending_dense: list[np.ndarray | None] = []  # their dense vectors (None: not given)
        self._generation = 0
        self._dirty = False
        # Whether unsaved changes leave a DIRTY marker on disk. An index that can replay what it has
        # not saved (write_log.FollowedIndex: from the saved stream position) turns it off: its saved
        # files stay a consistent earlier state, and a marker would make every restart rebuild.
        self.dirty_marker = True
        # Filter key -> which rows match (alive or not), for rows [0, len(mask)); extended as rows arrive.
        self._locations: dict[Any, np.ndarray] = {}
        # Writes (a sync, a followed write log) and searches may come from different threads of one
        # process (`headwater serve`); a search also seals pending rows, which can merge segments and
        # renumber rows. Every public read and write holds this lock, and a query that keeps row
        # numbers between calls (headwater.retrieval.searcher) holds it for the whole query.
        self.lock = threading.RLock()

    # Size ------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.row_of)

    def dense_nbytes(self) -> int:
        """Bytes of the dense vectors kept for filtered scans (mapped from disk once saved and loaded)."""
        sealed = sum(s.dense.nbytes for s in self._segments if s.dense is not None)
        return sealed + sum(v.nbytes for v in self._pending_dense if v is not None)

    def nbytes(self) -> int:
        """Approximate memory held by postings and row tables (not the dense vectors: dense_nbytes())."""
        postings = sum(s.matrix.data.nbytes + s.matrix.indices.nbytes + s.matrix.indptr.nbytes for s in self._segments)
        postings += sum(i.nbytes + v.nbytes + 200 for i, v in self._pending)  # arrays and their objects
        tables = sum(len(i) + len(u) + 150 for i, u in zip(self.ids, self.uris))  # strings and list slots
        return postings + tables + self.alive.nbytes

    # Writes (the same ones the collection receives) ----------------------------------------------

    @_locked
    def upsert(self, ids: Sequence[str], metadatas: Sequence[dict[str, Any]],
               embeddings: Sequence[Any] | None = None) -> None:
        """Index (or re-index) records from their metadata's encoded sparse vector, keeping their dense
        vectors (`embeddings`, as written to the collection) for filtered scans."""
        vectors = _as_vectors(embeddings, len(ids))
        for record_id, metadata, vector in zip(ids, metadatas, vectors):
            old = self.row_of.pop(record_id, None)
            if old is not None:  # overwritten: the old row must stop matching, vector or not
                self._mark_dirty()
                self.alive[old] = False
            encoded = metadata.get(keys.SPARSE)
            if not encoded:
                continue
            self._mark_dirty()
            row = len(self.ids)
            self.ids.append(record_id)
            self.uris.append(metadata.get(keys.URI, ""))
            self.sources.append(metadata.get(keys.SOURCE_ID, ""))
            self.row_of[record_id] = row
            self._pending.append(decode_sparse(encoded))
            self._pending_dense.append(vector)
        if len(self.alive) < len(self.ids):
            self.alive = np.concatenate([self.alive, np.ones(len(self.ids) - len(self.alive), dtype=bool)])
        if len(self._pending) >= SEAL_EVERY:  # unsealed rows cost ~1.4 KB each; sealed ones ~0.5 KB
            self._seal()

    @_locked
    def delete(self, ids: Iterable[str]) -> None:
        for record_id in ids:
            row = self.row_of.pop(record_id, None)
            if row is not None:
                self._mark_dirty()
                self.alive[row] = False

    def written(self, operation: str, ids: Sequence[str], metadatas: Sequence[dict[str, Any]] | None,
                embeddings: Sequence[Any] | None = None) -> None:
        """ChromaStore write observer: mirror every write into the index."""
        if operation == "upsert":
            self.upsert(ids, metadatas or [], embeddings)
        elif operation == "delete":
            self.delete(ids)
        # Metadata updates keep a record's id, so its uri, source and vector are unchanged.

    def _mark_dirty(self) -> None:
        if not self._dirty:
            self._dirty = True
            if self.directory and self.dirty_marker:
                self.directory.mkdir(parents=True, exist_ok=True)
                (self.directory / DIRTY).touch()

    # Segments --------------------------------------------------------------------------------

    def _seal(self) -> None:
        if not self._pending:
            return
        first = len(self.ids) - len(self._pending)
        lengths = [len(indices) for indices, _ in self._pending]
        terms = np.concatenate([indices for indices, _ in self._pending]) if self._pending else np.empty(0, np.int64)
        values = np.concatenate([values for _, values in self._pending]).astype(np.float32)
        columns = np.repeat(np.arange(len(self._pending)), lengths)
        vocabulary = int(terms.max()) + 1 if terms.size else 1
        matrix = sp.csr_matrix((values, (terms, columns)), shape=(vocabulary, len(self._pending)), dtype=np.float32)
        self._segments.append(_Segment(first, matrix, dense=_stack_dense(self._pending_dense)))
        self._pending = []
        self._pending_dense = []
        self._compact_if_needed()

    def _compact_if_needed(self) -> None:
        for start, end in iter(lambda: merges_due(self._segment_shape()), None):
            self._merge(start, end)

    def _segment_shape(self) -> list[tuple[int, int]]:
        """(rows, live rows) of each segment, oldest first."""
        return [(s.rows, int(np.count_nonzero(self.alive[s.first_row:s.first_row + s.rows]))) for s in self._segments]

    def _merge(self, start: int, end: int) -> None:
        """Replace segments [start, end) by one holding only their live rows; later rows move up."""
        run = self._segments[start:end]
        first = run[0].first_row
        last = run[-1].first_row + run[-1].rows
        keep = np.flatnonzero(self.alive[first:last])
        columns = [s.matrix.tocsc() for s in run]
        vocabulary = max(m.shape[0] for m in columns)
        merged = sp.hstack([sp.csc_matrix((m.data, m.indices, m.indptr), shape=(vocabulary, m.shape[1]))
                            for m in columns], format="csc")[:, keep]
        kept = (first + keep).tolist()
        dense = None
        if all(s.dense is not None for s in run) and len({s.dense.shape[1] for s in run}) == 1:
            # Each segment's live rows read where they lie (mapped files stay mostly unread).
            dense = np.concatenate([s.dense[self.alive[s.first_row:s.first_row + s.rows]] for s in run])
        self.ids[first:last] = [self.ids[r] for r in kept]
        self.uris[first:last] = [self.uris[r] for r in kept]
        self.sources[first:last] = [self.sources[r] for r in kept]
        self.alive = np.concatenate([self.alive[:first], np.ones(len(kept), dtype=bool), self.alive[last:]])
        # Rows before the run keep their numbers; the run's and everything after it are renumbered
        # (merges happen at the newest end, so "after" is usually nothing).
        moved = first + np.flatnonzero(self.alive[first:])
        self.row_of.update((self.ids[r], r) for r in moved.tolist())
        shift = (last - first) - len(kept)
        for segment in self._segments[end:]:
            segment.first_row -= shift
        self._segments[start:end] = [_Segment(first, merged.tocsr(), dense=dense)] if kept else []
        for key, mask in self._locations.items():
            self._locations[key] = mask[:first]

    @_locked
    def live_rows_by_source(self) -> dict[str, int]:
        """How many live rows each source has."""
        from collections import Counter

        sources = self.sources
        return dict(Counter(sources[r] for r in np.flatnonzero(self.alive).tolist()))

    # Filters ---------------------------------------------------------------------------------

    @_locked
    def location_rows(self, source_id: str | None, uri_prefix: str | None) -> np.ndarray:
        """Which rows are alive and inside a source and a uri prefix (None: any).

        A filtered search needs this on every query, and comparing 100,000 uris takes ~10 ms, so
        each filter's answer is kept and only extended over the rows that arrived since.
        """
        self._seal()  # sealing may merge segments and renumber rows: number them first
        key = (source_id, uri_prefix)
        mask = self._locations.pop(key, np.zeros(0, dtype=bool))
        if len(mask) < len(self.ids):
            start = len(mask)
            fresh = np.ones(len(self.ids) - start, dtype=bool)
            if source_id is not None:
                fresh &= np.array([s == source_id for s in self.sources[start:]], dtype=bool)
            if uri_prefix:
                fresh &= np.array([uri_under(u, uri_prefix) for u in self.uris[start:]], dtype=bool)
            mask = np.concatenate([mask, fresh])
        self._locations[key] = mask  # most recently used last
        while len(self._locations) > LOCATION_CACHE:
            del self._locations[next(iter(self._locations))]
        return mask & self.alive

    def dense_blocks(self, rows: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """(row numbers, their dense vectors) in blocks covering `rows` (sorted, as location_rows
        numbers them); None when any of them has no known vector.

        Not locked itself: the caller holds the lock from numbering the rows to reading them (a
        query does, and its dense side runs in another thread while it holds it).
        """
        if len(rows) and rows[-1] >= len(self.ids) - len(self._pending):
            return None  # unsealed rows (location_rows seals first, so only a caller that did not)
        blocks = []
        for segment in self._segments:
            low, high = np.searchsorted(rows, [segment.first_row, segment.first_row + segment.rows])
            if low == high:
                continue
            if segment.dense is None:
                return None
            for start in range(low, high, SCAN_BLOCK):
                part = rows[start:min(start + SCAN_BLOCK, high)]
                blocks.append((part, segment.dense[part - segment.first_row]))
        return blocks

    # Search ----------------------------------------------------------------------------------

    @_locked
    def scores(self, indices: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Dot product of the query with every row; dead rows score 0."""
        self._seal()
        out = np.zeros(len(self.ids), dtype=np.float32)
        query = np.asarray(values, dtype=np.float32)
        for segment in self._segments:
            known = indices < segment.matrix.shape[0]
            if not known.any():
                continue
            postings = segment.matrix[indices[known]]
            out[segment.first_row:segment.first_row + segment.rows] = postings.T @ query[known]
        out[~self.alive] = 0.0
        return out

    @_locked
    def search(self, indices: np.ndarray, values: np.ndarray, k: int,
               accept: Accept | None = None, rows: np.ndarray | None = None) -> list[tuple[str, float]]:
        """Top-k (id, score) with a positive score, among `rows` (a mask) if given; `accept` filters
        candidate rows, best first."""
        scores = self.scores(np.asarray(indices, dtype=np.int64), values)
        if rows is not None:
            scores[~rows] = 0.0
        matching = np.flatnonzero(scores > 0)
        hits: list[tuple[str, float]] = []
        window = max(4 * k, 64)
        start = 0
        # Filters are applied to a growing window of the best rows, so a selective filter still finds
        # its k matches while an unselective one costs a single small check. Only the window is
        # sorted: most rows share some term with a query, and sorting them all dominated the cost.
        while len(hits) < k and start < len(matching):
            end = min(start + window, len(matching))
            ranked = _top(matching, scores, end)
            rows = ranked[start:end].tolist()
            verdicts = accept(rows) if accept else [True] * len(rows)
            hits.extend((self.ids[r], float(scores[r])) for r, ok in zip(rows, verdicts) if ok)
            start = end
            window *= 4
        return hits[:k]

    # Persistence -----------------------------------------------------------------------------

    @_locked
    def persist(self) -> None:
        """Write unsaved segments, the alive bitmap and the manifest; then clear the DIRTY marker."""
        if self.directory is None or not self._dirty:
            return
        self._seal()
        self._compact_if_needed()  # a pass of deletes only seals nothing, but may leave a segment mostly dead
        self.directory.mkdir(parents=True, exist_ok=True)
        self._generation += 1
        for number, segment in enumerate(self._segments):
            if segment.name is None:
                segment.name = f"segment-{self._generation:06d}-{number:03d}.npz"
                rows = slice(segment.first_row, segment.first_row + segment.rows)
                arrays = {"data": segment.matrix.data, "indices": segment.matrix.indices,
                          "indptr": segment.matrix.indptr, "shape": np.array(segment.matrix.shape),
                          "ids": _pack(self.ids[rows]), "uris": _pack(self.uris[rows]),
                          "sources": _pack(self.sources[rows])}
                if segment.dense is not None:
                    arrays["dense"] = segment.dense
                _atomic_write(self.directory / segment.name, lambda handle: np.savez(handle, **arrays))
                if segment.dense is not None:  # from now on read from the file: the process keeps no copy
                    segment.dense = mapped_npz(self.directory / segment.name)["dense"]
        alive_name = f"alive-{self._generation:06d}.npy"
        _atomic_write(self.directory / alive_name, lambda handle: np.save(handle, self.alive))
        manifest = {"format": FORMAT_VERSION, "generation": self._generation, "alive": alive_name,
                    "rows": len(self.ids), "live": len(self.row_of),
                    "segments": [{"file": s.name, "first_row": s.first_row} for s in self._segments]}
        _atomic_write(self.directory / MANIFEST, lambda handle: handle.write(json.dumps(manifest).encode()))
        wanted = {s.name for s in self._segments} | {alive_name, MANIFEST}
        for path in self.directory.iterdir():  # files of earlier generations
            if path.name not in wanted and path.name != DIRTY and not path.name.startswith("."):
                path.unlink(missing_ok=True)
        (self.directory / DIRTY).unlink(missing_ok=True)
        self._dirty = False

    @staticmethod
    def saved_generation(directory: Path) -> int | None:
        """The generation last saved in `directory` (cheap: reads only the manifest); None if unusable."""
        try:
            if (Path(directory) / DIRTY).exists():
                return None
            return int(json.loads((Path(directory) / MANIFEST).read_text())["generation"])
        except (OSError, ValueError, KeyError):
            return None

    @classmethod
    def load(cls, directory: Path) -> SparseIndex | None:
        """The persisted index, or None when there is none or it cannot be trusted (dirty, partial)."""
        directory = Path(directory)
        if (directory / DIRTY).exists() or not (directory / MANIFEST).exists():
            return None
        try:
            manifest = json.loads((directory / MANIFEST).read_text())
            if manifest.get("format") != FORMAT_VERSION:
                return None
            index = cls(directory)
            for entry in manifest["segments"]:
                # Mapped, not read: a query touches only its terms' postings (segments are never rewritten).
                data = mapped_npz(directory / entry["file"])
                matrix = sp.csr_matrix((data["data"], data["indices"], data["indptr"]), shape=tuple(data["shape"]))
                rows = matrix.shape[1]
                index.ids.extend(_unpack(data["ids"], rows))
                index.uris.extend(_unpack(data["uris"], rows))
                index.sources.extend(_unpack(data["sources"], rows))
                dense = data.get("dense")
                if dense is not None and (dense.ndim != 2 or dense.shape[0] != rows):
                    return None
                index._segments.append(_Segment(entry["first_row"], matrix, entry["file"], dense))
            index.alive = np.load(directory / manifest["alive"])
        except (OSError, ValueError, KeyError):
            return None  # a writer replaced files under us: rebuilding is always correct
        if len(index.alive) != len(index.ids):
            return None
        index.row_of = {index.ids[r]: r for r in np.flatnonzero(index.alive)}
        index._generation = manifest["generation"]
        return index

    @classmethod
    def rebuild(cls, collection: Any, directory: Path | None = None, page: int = 2000) -> SparseIndex:
        """Build from the collection alone (every record's stored sparse vector and dense vector)."""
        index = cls(directory)
        for ids, metadatas, embeddings in keys.record_pages(collection, page=page):
            index.upsert(ids, metadatas, embeddings)
        index._dirty = True
        return index

    def generation(self) -> int:
        return self._generation

    def mark_changed(self) -> None:
        """Make the next persist() write a new generation even if nothing changed since the last."""
        self._dirty = True


def _as_vectors(embeddings: Sequence[Any] | None, count: int) -> list[np.ndarray | None]:
    """One float32 vector per record (None for each when no embeddings were given)."""
    if embeddings is None:
        return [None] * count
    matrix = np.asarray(embeddings, dtype=np.float32)
    if matrix.ndim != 2 or len(matrix) != count:
        return [None] * count  # ragged or missing: rank these rows through Chroma
    return list(matrix)


def _stack_dense(vectors: list[np.ndarray | None]) -> np.ndarray | None:
    """The rows' vectors as one matrix; None unless every row has one, all of one length."""
    if not vectors or any(v is None for v in vectors) or len({len(v) for v in vectors}) != 1:
        return None
    return np.vstack(vectors)


def _top(rows: np.ndarray, scores: np.ndarray, n: int) -> np.ndarray:
    """The n best rows, best first (ties by row number, so results are deterministic)."""
    if n < len(rows):
        rows = rows[np.argpartition(-scores[rows], n - 1)[:n]]
    return rows[np.lexsort((rows, -scores[rows]))]


def _pack(strings: list[str]) -> np.ndarray:
    """Strings as one NUL-separated UTF-8 byte array (fixed-width numpy strings pad to the longest)."""
    return np.frombuffer("\x00".join(strings).encode("utf-8"), dtype=np.uint8)


def _unpack(packed: np.ndarray, count: int) -> list[str]:
    return packed.tobytes().decode("utf-8").split("\x00") if count else []


def _atomic_write(path: Path, write) -> None:
    """Write through `write(handle)` to a temporary file, then rename it over `path`."""
    temporary = path.with_name("." + path.name + ".tmp")
    with open(temporary, "wb") as handle:
        write(handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)

"""Reading an embedded collection through Chroma's engine, without importing Chroma's Python client.

`import chromadb` costs more than a second on a slow core (its package imports opentelemetry's
exporters, every embedding function's module, httpx and jsonschema), more than the rest of a
one-off `headwater query` together. The embedded engine itself is the compiled module
`chromadb_rust_bindings`, which the Python client wraps (chromadb/api/rust.py) and which imports
in a few tens of milliseconds. A process that only reads, such as the CLI's query, opens the
collection there and asks the same engine the same questions the client would.

Only for processes that never write: the Python client shares one engine per directory within a
process, and an engine opened beside it would keep its own cache of the dense index. Anything
this module does not recognise (a Chroma release whose bindings differ, a database that needs a
migration first) makes `open_engine_reader` return None, and the caller opens the Python client.
"""

from __future__ import annotations

import json
import logging
import resource
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

TENANT = "default_tenant"
DATABASE = "default_database"
# The engine's constructor and the calls below, as chromadb/api/rust.py of the pinned release makes them.
_REQUIRED = ("Bindings", "SqliteDBConfig", "MigrationHash", "MigrationMode")


class EngineCollection:
    """The part of chromadb's Collection that search reads: get, query, count, metadata and configuration."""

    def __init__(self, bindings: Any, model: Any) -> None:
        self._bindings = bindings
        self.id = str(model.id)
        self.name = model.name
        self.metadata = model.metadata
        self.configuration = model.configuration

    def count(self) -> int:
        return self._bindings.count(self.id, TENANT, DATABASE)

    def get(self, ids: list[str] | None = None, where: dict[str, Any] | None = None, limit: int | None = None,
            offset: int | None = None, include: Sequence[str] = ("metadatas", "documents")) -> dict[str, Any]:
        response = self._call(self._bindings.get, self.id, ids, _where(where), limit, offset or 0, None,
                              list(include), TENANT, DATABASE)
        result = {"ids": response.ids, "documents": response.documents, "metadatas": response.metadatas,
                  "embeddings": response.embeddings}
        if "embeddings" in include:  # as the client returns them: one array
            result["embeddings"] = np.array(response.embeddings)
        return result

    def query(self, query_embeddings: list[list[float]], n_results: int = 10, where: dict[str, Any] | None = None,
              ids: list[str] | None = None,
              include: Sequence[str] = ("metadatas", "documents", "distances")) -> dict[str, Any]:
        response = self._call(self._bindings.query, self.id, ids, [np.asarray(v, dtype=np.float32) for v in query_embeddings],
                              n_results, _where(where), None, list(include), TENANT, DATABASE)
        result = {"ids": response.ids, "documents": response.documents, "metadatas": response.metadatas,
                  "distances": response.distances, "embeddings": response.embeddings}
        if "embeddings" in include and response.embeddings is not None:
            result["embeddings"] = [np.array(rows) for rows in response.embeddings]
        return result

    @staticmethod
    def _call(method: Any, *args: Any) -> Any:
        try:
            return method(*args)
        except Exception as exc:
            # The engine raises chromadb.errors types; a bad filter is the caller's ValueError, as
            # the Python client makes it.
            if type(exc).__name__ == "InvalidArgumentError":
                raise ValueError(str(exc)) from None
            raise


class EngineStore:
    """What a Searcher needs of a ChromaStore, for an embedded collection read through the engine."""

    cloud = False

    def __init__(self, collection: EngineCollection) -> None:
        self.collection = collection
        self.source_chunks: dict[str, int] = {}  # never read a source's documents: the index check counts

    def count(self) -> int:
        return self.collection.count()


def _where(where: dict[str, Any] | None) -> str | None:
    return json.dumps(where) if where else None


def open_engine_reader(chroma_path: Path, collection: str) -> EngineStore | None:
    """The collection at an embedded path, read through Chroma's engine; None where the client must open it.

    Raises ConfigurationError for a path that holds no Chroma database or a collection it does not
    hold, as ChromaStore does: a reader never creates either.
    """
    from headwater.store.chroma_store import missing_collection, missing_embedded_store

    database = Path(chroma_path) / "chroma.sqlite3"
    if not database.is_file():
        raise missing_embedded_store(chroma_path)
    try:
        import chromadb_rust_bindings as engine
    except ImportError:
        return None
    if not all(hasattr(engine, name) for name in _REQUIRED):
        return None
    try:
        # Validate, not Apply: a reader never migrates the database; one that needs it goes to the client.
        config = engine.SqliteDBConfig(hash_type=engine.MigrationHash.MD5, migration_mode=engine.MigrationMode.Validate,
                                       url=str(database))
        # The client sizes its cache of open dense indexes by the file-handle limit (five files an index).
        bindings = engine.Bindings(allow_reset=False, sqlite_db_config=config, persist_path=str(chroma_path),
                                   hnsw_cache_size=resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 5)
    except Exception as exc:  # noqa: BLE001  (whatever the engine objects to, the client handles or reports)
        log.debug("Chroma's engine did not open %s directly (%s); using the client", chroma_path, type(exc).__name__)
        return None
    try:
        model = bindings.get_collection(collection, TENANT, DATABASE)
    except Exception as exc:
        if type(exc).__name__ == "NotFoundError":
            raise missing_collection(collection) from None
        raise
    return EngineStore(EngineCollection(bindings, model))

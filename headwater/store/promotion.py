"""`headwater push`: copy an embedded collection to a Chroma server or Chroma Cloud, without re-embedding.

What a laptop built (records, dense vectors, metadata with the encoded SPLADE vectors, and the
per-document manifest) is copied as it is, so the target searches exactly like the source:
- in batches no larger than the target accepts (its client maximum, 4,999, Cloud's 300 per write);
- resumable: each page of the source is compared with what the target already holds, and only
  records that are missing or differ are written, so a push cut short is simply run again;
- the manifest is copied after every record, so a target is never told a document is complete
  before its chunks are there;
- refused when the target collection holds vectors from other models (or records of unknown
  origin): mixing models makes search meaningless;
- verified at the end: equal counts, and a sample of ids read back from both sides compared
  field by field (text, metadata, vector; vectors to the last bit of a float32, since a cosine
  collection normalises each vector again as it is written).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from headwater.store import chroma_store as keys
from headwater.errors import ConfigurationError
from headwater.store.manifest import COVERS
from headwater.store.manifest import SUFFIX as MANIFEST_SUFFIX

SAMPLE = 200  # ids read back from both sides at the end
# Keys a target adds on its own (Cloud's native sparse vector): not part of the comparison.
_TARGET_ONLY_KEYS = ("sparse_embedding",)


class PushRefused(ConfigurationError):
    """The target cannot take this collection as it is (other models, unknown records)."""


class PushVerificationFailed(ConfigurationError):
    """After the copy, the target does not hold what the source holds."""


@dataclass
class PushReport:
    collection: str
    target_collection: str
    source_records: int = 0
    copied: int = 0  # records written to the target (missing or different there)
    already_there: int = 0  # records the target held identically (a resumed or repeated push)
    manifest_copied: int = 0
    pruned: int = 0
    target_records: int = 0
    sampled: int = 0
    batch_limit: int = 0
    extra_in_target: list[str] = field(default_factory=list)


# Called after each written batch with (records done, records in the source).
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Target:
    """Where to push: a Chroma server (host, port, optional token) or Chroma Cloud (an API key)."""

    host: str | None = None
    port: int = 8000
    token: str | None = None
    cloud_api_key: str | None = None
    cloud_tenant: str | None = None
    cloud_database: str | None = None

    @classmethod
    def parse(cls, to: str, **options: Any) -> Target:
        """From `--to`: HOST, HOST:PORT, or `cloud` (with cloud_api_key in options)."""
        if to == "cloud":
            if not options.get("cloud_api_key"):
                raise ConfigurationError("--to cloud needs Chroma Cloud's API key: set HEADWATER_CHROMA_CLOUD_API_KEY "
                                         "(and HEADWATER_CHROMA_CLOUD_TENANT / _DATABASE as in the Cloud console)")
            return cls(**options)
        host, _, port = to.rpartition(":") if ":" in to else (to, "", "")
        if not host or (port and not port.isdigit()):
            raise ConfigurationError(f"--to {to!r} is not HOST, HOST:PORT or cloud; for example --to chroma.internal:8000")
        return cls(host=host, port=int(port) if port else 8000,
                   **{k: v for k, v in options.items() if k == "token"})

    @property
    def cloud(self) -> bool:
        return self.cloud_api_key is not None

    def client(self) -> Any:
        from pydantic import SecretStr

        from headwater.store.chroma_store import make_client
        from headwater.settings import Settings

        if self.cloud:
            settings = Settings(chroma_cloud_api_key=SecretStr(self.cloud_api_key or ""),
                                chroma_cloud_tenant=self.cloud_tenant, chroma_cloud_database=self.cloud_database)
        else:
            settings = Settings(chroma_host=self.host, chroma_port=self.port,
                                chroma_token=SecretStr(self.token) if self.token else None)
        return make_client(settings, fleet=True)

    def describe(self) -> str:
        return "Chroma Cloud" if self.cloud else f"{self.host}:{self.port}"


def open_source(path: Path, collection: str) -> tuple[Any, Any]:
    """(client, collection) of the embedded Chroma at `path`; refuses a path that holds no such collection."""
    import chromadb
    from chromadb.config import Settings as ChromaSettings
    from chromadb.errors import NotFoundError

    if not (Path(path) / "chroma.sqlite3").is_file():
        raise ConfigurationError(f"there is no embedded Chroma at {path}; pass the directory `headwater sync` "
                                 "wrote (--chroma-path, default .headwater/chroma)")
    client = chromadb.PersistentClient(path=str(path), settings=ChromaSettings(anonymized_telemetry=False))
    try:
        return client, client.get_collection(collection, embedding_function=None)
    except (NotFoundError, ValueError):
        names = sorted(c.name for c in client.list_collections() if not c.name.endswith(MANIFEST_SUFFIX))
        raise ConfigurationError(f"{path} holds no collection {collection!r} (it holds: {', '.join(names) or 'none'})") from None


def check_target(client: Any, name: str, dense_model: str, sparse_model: str) -> None:
    """Refuse a target collection written by other models, or holding records of unknown origin."""
    from chromadb.errors import NotFoundError

    from headwater.store.model_match import same_model

    try:
        existing = client.get_collection(name, embedding_function=None)
    except (NotFoundError, ValueError):
        return  # a new collection: nothing to conflict with
    recorded = existing.metadata or {}
    for key, wanted in ((keys.DENSE_MODEL_KEY, dense_model), (keys.SPARSE_MODEL_KEY, sparse_model)):
        have = recorded.get(key)
        if have and wanted and not same_model(have, wanted):
            raise PushRefused(f"the target collection {name!r} holds vectors from {have}, the source from {wanted}; "
                              "mixing models makes search meaningless: push to another --to-collection")
    if existing.count() and not recorded.get(keys.DENSE_MODEL_KEY):
        raise PushRefused(f"the target collection {name!r} holds {existing.count()} records that no Headwater sync "
                          "recorded models for; push to another --to-collection (or delete that one first)")


def push(source_path: Path, collection: str, target: Target, to_collection: str | None = None, *,
         batch_size: int | None = None, prune: bool = False, progress: Progress | None = None,
         sample: int = SAMPLE, observers: Sequence[Any] = ()) -> PushReport:
    """Copy `collection` from the embedded Chroma at `source_path` to `target`; see the module docstring."""
    from headwater.store import hnsw
    from headwater.store.chroma_store import ChromaStore
    from headwater.store.path_lock import ChromaPathLock
    from headwater.settings import HARD_BATCH_CAP

    name = to_collection or collection
    if not (Path(source_path) / "chroma.sqlite3").is_file():
        open_source(source_path, collection)  # says what is wrong, before the lock creates the directory
    # The lock keeps a sync from changing the source under the copy (the snapshot stays consistent).
    with ChromaPathLock(source_path):
        source_client, source = open_source(source_path, collection)
        models = source.metadata or {}
        dense_model, sparse_model = models.get(keys.DENSE_MODEL_KEY, ""), models.get(keys.SPARSE_MODEL_KEY, "")
        if not dense_model:
            raise PushRefused(f"collection {collection!r} records no dense model: only a collection written by "
                              "`headwater sync` can be pushed (its models are how the target is checked)")
        client = target.client()
        check_target(client, name, dense_model, sparse_model)
        store = ChromaStore(client, name, batch_size=batch_size or HARD_BATCH_CAP, dense_model=dense_model,
                            sparse_model=sparse_model, cloud=target.cloud, hnsw=hnsw.current(source),
                            observers=() if target.cloud else observers)
        report = PushReport(collection, name, source_records=source.count(), batch_limit=store.batch_limit)
        for ids, texts, embeddings, metadatas in _pages(source, store.batch_limit):
            missing = _differing(store.collection, ids, metadatas)
            report.already_there += len(ids) - len(missing)
            if missing:
                store.upsert([ids[n] for n in missing], [texts[n] for n in missing],
                             [embeddings[n] for n in missing], [metadatas[n] for n in missing])
                report.copied += len(missing)
            if progress is not None:
                progress(report.copied + report.already_there, report.source_records)
        report.manifest_copied = _copy_manifest(source_client, collection, store)
        report.extra_in_target = _extra_ids(source, store.collection)
        if report.extra_in_target and prune:
            store.delete(report.extra_in_target)
            report.pruned, report.extra_in_target = len(report.extra_in_target), []
        report.target_records = store.count()
        report.sampled = verify(source, store.collection, report, sample)
    return report


def _pages(collection: Any, page: int) -> Iterator[tuple[list[str], list[str], list[list[float]], list[dict]]]:
    """Every record with text, vector and metadata, a page at a time, in the collection's stable order."""
    offset = 0
    while True:
        got = collection.get(include=["documents", "embeddings", "metadatas"], limit=page, offset=offset)
        if not got["ids"]:
            return
        yield (got["ids"], got["documents"], [np.asarray(e, dtype=np.float32).tolist() for e in got["embeddings"]],
               got["metadatas"])
        offset += len(got["ids"])


def _comparable(metadata: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (metadata or {}).items() if k not in _TARGET_ONLY_KEYS}


def _differing(target: Any, ids: list[str], metadatas: list[dict[str, Any]]) -> list[int]:
    """Positions of records the target lacks, or holds with other metadata (another version, another vector)."""
    have = target.get(ids=ids, include=["metadatas"])
    held = {i: _comparable(m) for i, m in zip(have["ids"], have["metadatas"])}
    return [n for n, (i, m) in enumerate(zip(ids, metadatas)) if held.get(i) != _comparable(m)]


def _copy_manifest(client: Any, collection: str, store: Any) -> int:
    """The per-document manifest, written after every chunk so no entry claims chunks the target lacks yet."""
    from chromadb.errors import NotFoundError

    try:
        manifest = client.get_collection(collection + MANIFEST_SUFFIX, embedding_function=None)
    except (NotFoundError, ValueError):
        return 0  # written before the manifest existed: the target's first full pass backfills it
    target = store.manifest.collection
    copied = 0
    coverage: list[tuple[list[str], list[list[float]], list[dict]]] = []
    for ids, _, embeddings, metadatas in _pages(manifest, store.batch_limit):
        # Coverage records say "every document of this source has an entry": they go last.
        cover = [n for n, m in enumerate(metadatas) if COVERS in m]
        coverage.append(([ids[n] for n in cover], [embeddings[n] for n in cover], [metadatas[n] for n in cover]))
        covering = set(cover)
        entries = [n for n in range(len(ids)) if n not in covering]
        todo = [entries[n] for n in _differing(target, [ids[n] for n in entries], [metadatas[n] for n in entries])]
        if todo:
            target.upsert(ids=[ids[n] for n in todo], embeddings=[embeddings[n] for n in todo],
                          metadatas=[metadatas[n] for n in todo])
            copied += len(todo)
    for ids, embeddings, metadatas in coverage:
        if ids:
            target.upsert(ids=ids, embeddings=embeddings, metadatas=metadatas)
            copied += len(ids)
    return copied


def _extra_ids(source: Any, target: Any) -> list[str]:
    """Ids the target holds that the source does not (deleted locally since an earlier push)."""
    extra: list[str] = []
    for ids, _ in keys.metadata_pages(target, page=keys.PAGE):
        present = set(source.get(ids=ids, include=[])["ids"])
        extra.extend(i for i in ids if i not in present)
    return extra


def verify(source: Any, target: Any, report: PushReport, sample: int = SAMPLE) -> int:
    """Equal counts, and a sample of ids equal field by field on both sides; returns how many were compared."""
    if report.extra_in_target:
        raise PushVerificationFailed(
            f"the target holds {len(report.extra_in_target)} records the source does not (deleted locally since an "
            "earlier push?); run again with --prune to delete them there")
    if report.target_records != report.source_records:
        raise PushVerificationFailed(f"the target holds {report.target_records} records, the source "
                                     f"{report.source_records}; run the push again (it resumes)")
    all_ids = [i for ids, _ in keys.metadata_pages(source, page=keys.PAGE) for i in ids]
    chosen = random.Random(0).sample(all_ids, min(sample, len(all_ids)))
    if not chosen:
        return 0
    include = ["documents", "embeddings", "metadatas"]
    mine, theirs = source.get(ids=chosen, include=include), target.get(ids=chosen, include=include)
    theirs_by_id = {i: n for n, i in enumerate(theirs["ids"])}
    for n, record_id in enumerate(mine["ids"]):
        m = theirs_by_id.get(record_id)
        if m is None:
            differs = "missing"
        elif mine["documents"][n] != theirs["documents"][m]:
            differs = "text"
        elif _comparable(mine["metadatas"][n]) != _comparable(theirs["metadatas"][m]):
            differs = "metadata"
        elif not same_vector(mine["embeddings"][n], theirs["embeddings"][m]):
            differs = "vector"
        else:
            continue
        raise PushVerificationFailed(f"record {record_id} differs between the source and the target after the "
                                     f"copy ({differs}); run the push again (it rewrites records that differ)")
    return len(chosen)


def same_vector(a: Any, b: Any) -> bool:
    """Equal up to the last bit of a float32: a cosine collection normalises every vector it is given,
    so normalising an already normalised vector again may move a component by one unit in the last place."""
    return np.allclose(np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32), rtol=1e-6, atol=1e-7)


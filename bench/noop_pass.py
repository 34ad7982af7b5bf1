"""What a full pass costs when little or nothing changed: 10,000 documents, 200,000 chunks.

A pass must cost what changed, not what is stored. Embedding 200,000 real chunks would take
hours here, so the collection is synthesised: a folder of ``--documents`` small Markdown files,
and for each file ``--chunks`` chunk records written straight into an embedded Chroma with the
metadata a sync writes (version and hash of the real file, today's chunker fingerprint, ids from
``chunk_ids``), a random 384-d unit vector and a plausible encoded SPLADE vector (60-120 terms).
They are written without manifest entries, as a collection synced before the manifest existed.

Each pass then runs in a fresh process through ``open_engine`` and ``SyncEngine.sync``, exactly as
``headwater sync`` does, and reports its wall time, the engine's open time (Chroma client, the
persisted sparse index) and the process's peak RSS:

1. ``backfill``: the first pass over the old collection: it reads every chunk's metadata (what
   every pass cost before the manifest) and writes the 10,000 manifest entries.
2. ``unchanged`` (3 times): nothing changed; decided from the manifest alone.
3. ``changed``: ``--changed`` files rewritten with new text. The models are loaded and warmed
   (those documents parsed, chunked and embedded once) before the timer starts; the same work is
   timed again on its own afterwards, so the pass can be compared with "unchanged pass + their
   embedding".
4. ``fleet``: the fleet's list step (``headwater.fleet.steps.list_source``: listing, deciding,
   storing the run's documents in Redis) against a ``chroma run`` server over the same data,
   unchanged and with ``--changed`` other files rewritten.

The load average is printed with every figure: the machine is shared, so compare within a run.

Run: ``python -m bench.noop_pass [--documents N] [--chunks N] [--changed N] [--dir DIR] [--keep]``
(``--dir`` reuses a corpus built there before: building it writes 200,000 records, ~7 minutes;
``--no-backfill`` then keeps its manifest and skips the first pass).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SOURCE_ID = "bench"
COLLECTION = "noop"
DIMENSIONS = 384
VOCABULARY = 30522  # SPLADE's (BERT's) vocabulary
WRITE_BATCH = 4000
SEED = 20261201


def settings_for(base: Path, **overrides):  # noqa: ANN201
    from headwater.settings import Settings

    return Settings(chroma_path=base / "data", collection=COLLECTION, **overrides)


def load() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


# Building the corpus ------------------------------------------------------------------------

def document_text(n: int, salt: str = "") -> str:
    paragraphs = [f"Paragraph {j} of document {n}{salt}: how service {n % 97} rotates its keys, retries "
                  f"its writes and reports step {j} to the on-call engineer." for j in range(12)]
    return f"# Document {n}{salt}\n\n" + "\n\n".join(paragraphs) + "\n"


def build(base: Path, documents: int, chunks: int) -> None:
    """The folder and the old-style collection (chunks only, no manifest), plus its sparse index."""
    import numpy as np

    from connectors.folder import FolderConnector
    from headwater.store.chroma_store import SPARSE
    from headwater.pipeline.stores import open_store
    from headwater.pipeline.document_plan import DocumentFacts, chunk_metadata
    from headwater.sync.embedded import open_sparse_index, sparse_index_dir
    from headwater.ids import bytes_hash, chunk_ids
    from headwater.pipeline.model_identity import dense_identity, sparse_identity
    from headwater.models import Chunk
    from headwater.store.sparse_codec import encode_sparse
    from headwater.pipeline.chunk import chunker_fingerprint

    folder = base / "source"
    for n in range(documents):
        path = folder / f"team{n // 100:03d}" / f"doc{n:05d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(document_text(n))
    settings = settings_for(base)
    store = open_store(settings, dense_model=dense_identity(settings.dense_model_dir),
                                      sparse_model=sparse_identity(settings.sparse_model_dir))
    fingerprint = chunker_fingerprint(settings)
    rng = np.random.default_rng(SEED)
    pending: list[tuple[str, str, list[float], dict]] = []
    started = time.perf_counter()
    for change in FolderConnector(SOURCE_ID, folder).list_documents():
        data = (folder / change.uri).read_bytes()
        facts = DocumentFacts(SOURCE_ID, change.uri, change.version, bytes_hash(data),
                              (folder / change.uri).stat().st_mtime, "text/markdown", "unstructured")
        texts = [f"{change.uri}\n\nSection {j}: " + data.decode()[j * 40:j * 40 + 400] for j in range(chunks)]
        for index, (record_id, text) in enumerate(zip(chunk_ids(SOURCE_ID, change.uri, texts), texts)):
            metadata = chunk_metadata(facts, Chunk(text=text, index=index, section=f"Document {index}",
                                                   chunker=fingerprint), chunks, "Document")
            terms = int(rng.integers(60, 121))
            metadata[SPARSE] = encode_sparse(rng.choice(VOCABULARY, terms, replace=False),
                                             rng.gamma(1.5, 0.5, terms).astype(np.float32))
            vector = rng.standard_normal(DIMENSIONS)
            pending.append((record_id, text, (vector / np.linalg.norm(vector)).tolist(), metadata))
        if len(pending) >= WRITE_BATCH:
            _write(store, pending)
    _write(store, pending)
    print(f"built {documents} documents / {store.count()} chunks in {time.perf_counter() - started:.0f} s ({load()})",
          flush=True)
    open_sparse_index(store, sparse_index_dir(settings), save=True)  # what the first `headwater sync` would do


def _write(store, pending: list) -> None:  # noqa: ANN001
    if pending:
        ids, texts, vectors, metadatas = map(list, zip(*pending))
        store.upsert(ids, texts, vectors, metadatas)
        pending.clear()


# One measured pass, in its own process --------------------------------------------------------

def measure_embedded(base: Path, kind: str, changed: list[str]) -> dict:
    from connectors.folder import FolderConnector
    from headwater.sync.embedded import open_engine

    started = time.perf_counter()
    with open_engine(settings_for(base)) as engine:
        opened = time.perf_counter() - started
        embed_seconds = None
        if kind == "changed":  # loading and warming the models and parsers is not the pass
            _embedding_time(engine, base, changed)
        begin = time.perf_counter()
        report = engine.sync(FolderConnector(SOURCE_ID, base / "source"))
        seconds = time.perf_counter() - begin
        if kind == "changed":
            embed_seconds = _embedding_time(engine, base, changed)
    return {"kind": kind, "open_s": round(opened, 2), "pass_s": round(seconds, 2), "embed_s": embed_seconds,
            "rss_mb": _peak_rss_mb(), "unchanged": report.unchanged, "updated": report.updated,
            "embedded": report.chunks_embedded, "load": load()}


def _embedding_time(engine, base: Path, uris: list[str]) -> float:  # noqa: ANN001
    """Parse, chunk and embed the changed documents again, warm: what their embedding costs alone."""
    from headwater.pipeline.chunk import chunk_document
    from headwater.pipeline.parse import parse_document

    begin = time.perf_counter()
    texts = [c.text for uri in uris
             for c in chunk_document(parse_document(uri, (base / "source" / uri).read_bytes()), uri, engine.settings)]
    engine.dense.embed(texts), engine.sparse.encode(texts)
    return round(time.perf_counter() - begin, 2)


def measure_fleet(base: Path, redis_url: str, host: str, port: int) -> dict:
    from connectors.folder import FolderConnector
    from headwater.fleet import steps
    from headwater.fleet.context import Fleet, local_target
    from headwater.fleet.enqueue import enqueue_sync

    settings = settings_for(base, redis_url=redis_url, chroma_host=host, chroma_port=port)
    fleet = Fleet(settings, send=lambda *args, **kwargs: None)  # the list step only: no workers follow
    run_id = enqueue_sync(fleet, FolderConnector(SOURCE_ID, base / "source").spec(), local_target(settings))
    begin = time.perf_counter()
    steps.list_source(fleet, run_id)
    seconds = time.perf_counter() - begin
    run = fleet.runs.get(run_id)
    return {"kind": "fleet list", "pass_s": round(seconds, 2), "rss_mb": _peak_rss_mb(),
            "unchanged": run.counters["unchanged"], "queued": run.counters["queued"],
            "errors": run.errors, "load": load()}


def _peak_rss_mb() -> int:
    """This process's peak RSS. Not getrusage's ru_maxrss: Linux carries the parent's peak across exec."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) // 1024


def run_measure(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "bench.noop_pass", "--measure", *args], check=True,
                         capture_output=True, text=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(json.dumps(result), flush=True)
    return result


def rewrite(base: Path, numbers: list[int], salt: str) -> list[str]:
    uris = [f"team{n // 100:03d}/doc{n:05d}.md" for n in numbers]
    for n, uri in zip(numbers, uris):
        (base / "source" / uri).write_text(document_text(n, salt))
    return uris


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=10_000)
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--changed", type=int, default=10)
    parser.add_argument("--dir", type=Path, help="build the corpus here, or reuse the one built here before")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--no-backfill", action="store_true", help="with --dir: keep its manifest, skip the first pass")
    parser.add_argument("--measure", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        kind, base, *rest = args.measure
        if kind == "fleet":
            result = measure_fleet(Path(base), rest[0], rest[1], int(rest[2]))
        else:
            result = measure_embedded(Path(base), kind, rest)
        print(json.dumps(result))
        return

    base = args.dir or Path(tempfile.mkdtemp(prefix="headwater-noop-"))
    fresh = not (base / "data").is_dir()
    results = {}
    if fresh:
        build(base, args.documents, args.chunks)
    elif not args.no_backfill:
        print(f"reusing the corpus in {base} (delete it to rebuild); its manifest is dropped to time the backfill")
        import chromadb

        chromadb.PersistentClient(path=str(base / "data")).delete_collection(COLLECTION + "__manifest")
    if fresh or not args.no_backfill:
        results["backfill"] = run_measure("backfill", str(base))
    else:  # files an earlier run's fleet step rewrote are still to index: not an unchanged pass yet
        print("settling (not counted):", end=" ")
        run_measure("unchanged", str(base))
    unchanged = [run_measure("unchanged", str(base)) for _ in range(3)]
    results["unchanged"] = sorted(unchanged, key=lambda r: r["pass_s"])[1]
    rng = random.Random(SEED)
    picked = rng.sample(range(args.documents), 2 * args.changed)
    uris = rewrite(base, picked[:args.changed], f" (edited {time.time_ns()})")
    results["changed"] = changed = run_measure("changed", str(base), *uris)
    limit = 2 * results["unchanged"]["pass_s"] + changed["embed_s"]
    print(f"changed pass {changed['pass_s']} s vs 2 x unchanged {results['unchanged']['pass_s']} s + embedding "
          f"{changed['embed_s']} s = {limit:.2f} s: {'within' if changed['pass_s'] <= limit else 'OVER'}")

    from tests.services import chroma_server, redis_server

    with redis_server(base) as redis_url, chroma_server(base) as (host, port):
        results["fleet"] = run_measure("fleet", str(base), redis_url, host, str(port))
        rewrite(base, picked[args.changed:], f" (edited {time.time_ns()})")
        results["fleet changed"] = run_measure("fleet", str(base), redis_url, host, str(port))

    print("\n| pass | wall s | peak RSS MB | decided unchanged | load |\n|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['pass_s']} | {r['rss_mb']} | {r['unchanged']} | {r['load']} |")
    if not args.keep and not args.dir:
        shutil.rmtree(base, ignore_errors=True)
    elif args.keep:
        print(f"kept {base}")


if __name__ == "__main__":
    main()

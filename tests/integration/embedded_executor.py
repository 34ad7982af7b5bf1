"""Embedded mode in a process of its own, driven over stdin/stdout (one JSON request a line, one answer a line).

The mode-equivalence suite runs embedded mode here rather than in the test process so that it
runs with the same privileges as the fleet's workers (without root's DAC override: an unreadable
file is unreadable to both). Each collection gets its own embedded Chroma directory and engine,
kept open across requests (the models load once). An answer carries the pass's report and the
collection's records, embeddings included, so the test never opens the directory itself.

Requests: {"op": "sync", "collection": C, "spec": SPEC}
          {"op": "apply", "collection": C, "spec": SPEC, "changes": [DocumentChange JSON, ...]}
          {"op": "push", "collection": C, "spec": SPEC, "push": {"before": B, "after": A}}
"""

from __future__ import annotations

import contextlib
import json
import sys
import traceback
from pathlib import Path
from typing import Any

from connectors import build_connector
from headwater.sync.embedded import open_engine
from headwater.models import DocumentChange
from headwater.settings import Settings


class Executor:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.stack = contextlib.ExitStack()
        self.engines: dict[str, Any] = {}

    def settings(self, collection: str) -> Settings:
        return Settings(chroma_path=self.root / collection / "chroma", collection=collection,
                        git_cache_dir=self.root / "git-cache",
                        database_url=f"sqlite:///{self.root / 'sources.sqlite3'}")

    def engine(self, collection: str) -> Any:
        if collection not in self.engines:
            self.engines[collection] = self.stack.enter_context(open_engine(self.settings(collection)))
        return self.engines[collection]

    def connector(self, collection: str, spec: dict) -> Any:
        settings = self.settings(collection)
        options = dict(spec["options"])
        if spec["kind"] == "git":
            options["cache_dir"] = settings.git_cache_dir
        connector = build_connector(spec["kind"], spec["id"], **options)
        if hasattr(connector, "keep_state_in"):  # as the CLI does: a crawl's state next to the embedded Chroma
            connector.keep_state_in(settings.chroma_path.parent / "crawl")
        return connector

    def handle(self, request: dict) -> dict:
        collection = request["collection"]
        engine = self.engine(collection)
        connector = self.connector(collection, request["spec"])
        if request["op"] == "sync":
            report = engine.sync(connector)
        elif request["op"] == "apply":
            report = engine.apply(connector, [DocumentChange.from_json(c) for c in request["changes"]])
        elif request["op"] == "push":
            from headwater.sync.git_pushes import Push, sync_push_embedded
            from headwater.store.source_cursors import CursorStore

            cursors = CursorStore.from_settings(self.settings(collection))
            push = Push(connector.source_id, request["push"]["before"], request["push"]["after"])
            report = sync_push_embedded(engine, connector, cursors, push)
        else:
            raise ValueError(f"unknown op {request['op']!r}")
        if hasattr(connector, "close"):
            connector.close()
        got = engine.store.collection.get(include=["documents", "metadatas", "embeddings"])
        records = {i: [d, m, [float(x) for x in e]]
                   for i, d, m, e in zip(got["ids"], got["documents"], got["metadatas"], got["embeddings"])}
        return {"report": report.to_json() if report is not None else None, "records": records}


def main() -> None:
    executor = Executor(Path(sys.argv[1]))
    answers, sys.stdout = sys.stdout, sys.stderr  # whatever a library prints must not corrupt the answers
    with executor.stack:
        for line in sys.stdin:
            try:
                answer = executor.handle(json.loads(line))
            except BaseException:  # noqa: BLE001  (the test shows it; this process serves the next request)
                answer = {"error": traceback.format_exc()}
            answers.write(json.dumps(answer) + "\n")
            answers.flush()


if __name__ == "__main__":
    main()

"""A long-lived searching process against a Chroma server, driven by bench.sparse_index_scale.

Configured by the environment (HEADWATER_CHROMA_HOST, _CHROMA_PORT, _REDIS_URL, _COLLECTION,
_SPARSE_INDEX_DIR), it opens a Searcher as `headwater serve` or `headwater query` would and
prints one JSON line: how long opening took and whether it rebuilt the sparse index. Then, for
each JSON line on stdin ({"text", "id", "written": epoch seconds}), it searches the sparse side
for the text until the id is among the hits and prints how long after the write that was.
"""

from __future__ import annotations

import json
import sys
import time


def main() -> int:
    from headwater.retrieval.searcher import open_searcher
    from headwater.settings import load_settings

    started = time.perf_counter()
    searcher = open_searcher(load_settings())
    opened = time.perf_counter() - started
    searcher.search("warm up the query model", k=1, mode="sparse")
    print(json.dumps({"open_s": opened, "rebuilt": bool(searcher.follower and searcher.follower.rebuilt),
                      "chunks": len(searcher.index)}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        deadline = time.time() + 60
        while time.time() < deadline:
            if any(hit.id == request["id"] for hit in searcher.search(request["text"], k=10, mode="sparse")):
                print(json.dumps({"found_after_s": time.time() - request["written"]}), flush=True)
                break
            time.sleep(0.02)
        else:
            print(json.dumps({"found_after_s": None}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""One JSON shape for a run in both modes (the fleet's Run.to_json, plus live progress)."""

from __future__ import annotations

from typing import Any

FINISHED = ("complete", "complete_with_errors", "failed", "cancelled")


def with_progress(run: dict[str, Any], done: int | None = None, total: int | None = None) -> dict[str, Any]:
    """Adds progress {done, total} (documents to process; unchanged ones are not work) and `finished`."""
    if total is None:
        total = int(run.get("queued", 0))
    if done is None:
        done = sum(int(run.get(c, 0)) for c in ("indexed", "skipped", "failed"))
    finished = run["status"] in FINISHED
    if run["status"] in ("complete", "complete_with_errors"):
        # Every document was dealt with, whatever the counters caught. A cancelled or failed run
        # shows how far it got: a full bar there would say work was done that was not.
        done = max(done, total)
    run["progress"] = {"done": min(done, total) if total else done, "total": total}
    run["finished"] = finished
    run["failed_documents"] = [{"uri": uri, "reason": reason} for uri, reason in sorted(run.get("errors", {}).items())]
    run["skipped_documents"] = [{"uri": uri, "reason": reason} for uri, reason in sorted(run.get("skip_reasons", {}).items())]
    return run

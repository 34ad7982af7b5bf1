"""A push to a git source's branch, turned into the least work that brings the collection to the pushed commit.

A push whose `before` is the source's cursor (the commit the collection holds) and an ancestor
of `after` is applied as live changes: git's tree diff of before..after, exact renames as a
delete plus an upsert of the same bytes (the engine reports them as moved). Anything else — a
force push, a new branch, an unknown `before`, a push that arrives out of order, or a source
never synced — is a full reconciliation of the branch's newest commit against the collection.
A push whose commit the cursor already contains is late and changes nothing. Deleting the branch
keeps the collection and marks the source.

Both modes share the decision; embedded serve applies it with its engine, fleet serve queues it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from connectors.git import ZERO_COMMIT, GitConnector
from headwater.models import DocumentChange, Trigger, time_sequence
from headwater.store.source_cursors import CursorStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Push:
    """What a push delivery says (GitHub's payload fields), for one configured source."""

    source_id: str
    before: str
    after: str
    delivery: str = ""
    deleted: bool = False
    forced: bool = False

    @classmethod
    def from_payload(cls, source_id: str, payload: dict[str, Any], delivery: str) -> Push:
        return cls(source_id, str(payload.get("before") or ZERO_COMMIT), str(payload.get("after") or ZERO_COMMIT),
                   delivery, deleted=bool(payload.get("deleted")), forced=bool(payload.get("forced")))


@dataclass
class PushPlan:
    """none (already synced, or the branch is gone), incremental (these changes) or full (reconcile)."""

    kind: str
    connector: GitConnector | None = None  # pinned to the commit the plan brings the collection to
    changes: list[DocumentChange] = field(default_factory=list)
    reason: str = ""

    @property
    def commit(self) -> str | None:
        return self.connector.commit if self.connector else None


def plan_push(connector: GitConnector, cursor: str | None, push: Push) -> PushPlan:
    """Decide how to bring the collection from `cursor` to what the push says the branch holds (fetches first)."""
    if push.deleted or push.after == ZERO_COMMIT:
        return PushPlan("none", reason=f"branch {connector.branch} was deleted; the collection is kept as it was")
    head = connector.fetch()
    after = push.after if connector.has_commit(push.after) else head
    if cursor and connector.has_commit(cursor) and connector.is_ancestor(after, cursor):
        return PushPlan("none", reason=f"already synced: {cursor[:12]} contains {after[:12]}")
    if cursor is None:
        return PushPlan("full", connector.pinned(head), reason="first sync of this source")
    if push.before != cursor:
        return PushPlan("full", connector.pinned(head),
                        reason=f"push from {push.before[:12]} but the collection holds {cursor[:12]} "
                               "(out of order, or events were missed)")
    if not connector.has_commit(cursor) or not connector.is_ancestor(cursor, after):
        return PushPlan("full", connector.pinned(head), reason="forced push: the old commit is not an ancestor")
    pinned = connector.pinned(after)
    # One sequence for the whole push: each uri's changes are ordered by when pushes were processed.
    changes = connector.document_changes(connector.changes_between(cursor, after), time_sequence())
    return PushPlan("incremental", pinned, changes, reason=f"{cursor[:12]}..{after[:12]}: {len(changes)} changes")


def handle_push(connector: GitConnector, cursors: CursorStore, push: Push,
                execute: Callable[[PushPlan], Any]) -> Any:
    """Decide a push, hand its plan to an executor, then move the cursor: the one sequence both modes follow.

    The cursor moves to the plan's commit once the executor has taken the plan without raising:
    embedded mode has then written it (failed documents included: their reasons are in the
    report, and the next full run retries them), the fleet has queued it as a durable run (which
    its workers finish or fail document by document). An executor that raises leaves the cursor
    where it was, so the next push reconciles the branch in full. A deleted branch marks the source.
    """
    row = cursors.get(connector.source_id)
    plan = plan_push(connector, row.cursor if row else None, push)
    log.info("push to %s: %s (%s)", connector.source_id, plan.kind, plan.reason)
    if plan.kind == "none":
        if push.deleted:
            cursors.mark(connector.source_id, plan.reason)
        return None
    result = execute(plan)
    cursors.set(connector.source_id, plan.commit)
    return result


def sync_push_embedded(engine: Any, connector: GitConnector, cursors: CursorStore, push: Push) -> Any:
    """Apply a push in this process; returns the engine's report (None when there was nothing to do)."""
    def execute(plan: PushPlan) -> Any:
        return engine.sync(plan.connector) if plan.kind == "full" else engine.apply(plan.connector, plan.changes)

    return handle_push(connector, cursors, push, execute)


def sync_push_fleet(fleet: Any, target: Any, connector: GitConnector, cursors: CursorStore, push: Push) -> str | None:
    """Queue a push for the workers; returns the run id (None when there was nothing to queue).

    The next push diffs from the cursor this moves, and its live changes are ordered after this
    run's, so they may run side by side.
    """
    from headwater.fleet.enqueue import enqueue_changes, enqueue_sync

    def execute(plan: PushPlan) -> str | None:
        spec = plan.connector.spec()  # type: ignore[union-attr]
        if plan.kind == "full":
            return enqueue_sync(fleet, spec, target, trigger=Trigger.WEBHOOK)
        return enqueue_changes(fleet, spec, target, plan.changes, Trigger.WEBHOOK) if plan.changes else None

    return handle_push(connector, cursors, push, execute)

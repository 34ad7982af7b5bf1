"""Batched steps (dense, sparse, write): one task takes many documents of a collection, each by its own lease.

A document joins its collection's queue for a step in the same script that creates the step's
lease (headwater.fleet.state), weighted by what it adds to a batch: the texts it needs embedded,
or one for a write. A batch task is sent at once when a full batch waits, or when the runs whose
documents just joined have nothing more that could join (a run's tail), else once, a short delay
later, for whatever has gathered by then; no worker polls. A task that takes a batch sends the
next one at once when another full batch still waits, so a second worker need not wait for the
first to finish. A task takes the due documents oldest
first until its batch is full, renews their leases while it works, and commits each document on
its own, so a batch that dies halfway puts back only what it had not finished.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from headwater.fleet import keys
from headwater.fleet.context import Fleet
from headwater.fleet.state import DENSE, SPARSE, WRITE, Moved
from headwater.settings import Settings
from headwater import queues as names

log = logging.getLogger(__name__)
BATCH_TASK = {DENSE: names.EMBED_DENSE, SPARSE: names.EMBED_SPARSE, WRITE: names.FLUSH}
# A write starts at once when this many documents are ready: fewer than a run's window, or a run
# of small documents would wait out the flush delay for every window. It takes up to the maximum.
WRITE_BATCH_READY_DOCUMENTS = 16
WRITE_BATCH_DOCUMENTS = 64  # documents per write batch; the store splits records to its own limit
EMBED_BATCH_DOCUMENTS = 256  # a bound on documents per embedding batch (many tiny documents)


@dataclass(frozen=True)
class Limits:
    full: float  # a batch task is sent at once when this much weight (texts, or documents) is due
    take: float  # a task takes documents until it holds this much weight ...
    documents: int  # ... or this many documents
    delay: float  # how long a batch that is not full waits for more


def limits(settings: Settings, step: str) -> Limits:
    if step == WRITE:
        return Limits(WRITE_BATCH_READY_DOCUMENTS, WRITE_BATCH_DOCUMENTS, WRITE_BATCH_DOCUMENTS,
                      settings.flush_delay_seconds)
    texts = settings.embed_batch_texts
    return Limits(texts, texts, EMBED_BATCH_DOCUMENTS, settings.embed_batch_delay_seconds)


def schedule(fleet: Fleet, collection: str, step: str, runs: Iterable[str] = (), urgent: bool = False) -> None:
    """Send a batch task now when a full batch waits, else one (at a time) after the step's delay.

    `runs` are the runs whose documents just joined the queue: when none of them has anything left
    that could join it, the batch goes now (a run's last documents do not wait out the delay).
    `urgent` (a live change's document is due): now, whatever waits. Live changes are one or a few
    documents each, someone is waiting to find them, and nothing more of their run will come to share
    the batch; a task that finds the batch already taken by another does nothing.
    """
    if urgent:
        fleet.send(BATCH_TASK[step], [collection])
        return
    limit = limits(fleet.settings, step)
    due = fleet.state.batch_due(collection, step, limit.full, limit.delay, tuple(runs))
    if due == "now":
        fleet.send(BATCH_TASK[step], [collection])
    elif due == "later":
        fleet.send(BATCH_TASK[step], [collection], countdown=limit.delay)


@dataclass
class Batch:
    """Documents of one collection this process holds the leases of, for one batched step."""

    collection: str
    step: str
    token: str
    taken: list[tuple[str, str]]  # (run, uri)
    poisoned: list[Moved] = field(default_factory=list)  # documents failed at the taking, as poison pills

    @property
    def members(self) -> list[str]:
        return [keys.member(run_id, self.step, uri) for run_id, uri in self.taken]


def take(fleet: Fleet, collection: str, step: str) -> Batch:
    """Lease the next batch of due documents (possibly none)."""
    token = fleet.new_token()
    limit = limits(fleet.settings, step)
    taken, poisoned = fleet.state.take_batch(collection, step, token, limit.documents, limit.take)
    return Batch(collection, step, token, taken, poisoned)


def retry(fleet: Fleet, batch: Batch, exc: Exception, doing: str, check: str) -> list[tuple[str, Moved]]:
    """The batch failed in a way worth retrying: each document back in its queue after a backoff, or failed.

    Returns the transitions of documents that gave up (their runs may have more to send).
    """
    attempts = max(int(fleet.redis.hget(keys.ATTEMPTS, m) or 0) for m in batch.members)
    delay = fleet.backoff(attempts + 1)
    reason = (f"gave up after {fleet.settings.task_max_retries} retries {doing}: {type(exc).__name__}; "
              f"{check}, then `headwater retry RUN`")
    log.warning("%s for %d documents of %s failed (%s: %s); retry in %.0fs", doing, len(batch.taken),
                      batch.collection, type(exc).__name__, exc, delay)
    ended = []
    for run_id, uri in batch.taken:
        moved = fleet.state.fail_attempt(run_id, batch.step, uri, batch.token, delay, reason)
        if moved.status != "retry":
            ended.append((run_id, moved))
    fleet.send(BATCH_TASK[batch.step], [batch.collection], countdown=delay)
    return ended

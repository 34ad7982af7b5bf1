"""One consolidation pass over a collection: stage 1, stage 2, then the knowledge collection made to match.

A pass is a reconciliation, like a full sync: it works out which knowledge records the collection's
chunks call for now, writes the new ones, removes every record no longer called for (its chunks
changed or are gone: no orphan survives a pass) and points each source chunk at its records.
Decisions already in the knowledge collection are reused, so a repeated pass asks the LLM only
about pairs it has not decided before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from headwater.store.chroma_store import DOC_VERSION, SOURCE_ID, SPARSE, URI
from headwater.consolidation import knowledge as kn
from headwater.consolidation import stage1
from headwater.consolidation.decision import PROMPT_VERSION, Decision, Passage, messages
from headwater.consolidation.llm import Backend, Runner
from headwater.consolidation.text import body

log = logging.getLogger(__name__)

DenseFn = Callable[[list[str]], list[list[float]]]
SparseFn = Callable[[list[str]], list[str]]  # encoded sparse vectors (headwater.store.sparse_codec)


@dataclass
class Row:
    """One line of a pass's table: a group of chunks, what was decided about it, and why."""

    cluster: str
    decision: str
    reason: str
    method: str
    knowledge_id: str


@dataclass
class PassReport:
    collection: str
    knowledge_collection: str
    dry_run: bool
    chunks: int = 0
    copy_clusters: int = 0
    candidate_pairs: int = 0
    settled_in_stage1: int = 0
    llm_pairs: int = 0
    asked: int = 0
    reused: int = 0
    failed: dict[str, str] = field(default_factory=dict)  # group -> why no decision was applied
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    written: int = 0
    removed: int = 0
    pointers_changed: int = 0
    stage1_seconds: float = 0.0
    stage2_seconds: float = 0.0
    model: str = ""
    rows: list[Row] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


@dataclass
class _Group:
    """A knowledge record the pass calls for."""

    id: str
    members: list[str]
    decision: str
    reason: str
    method: str
    similarity: float
    text_from: str | None = None  # a member whose text and vectors the record reuses
    new_text: str | None = None  # or a text of its own (merged, or both sides of a conflict)
    newer: list[str] = field(default_factory=list)
    superseded: list[str] = field(default_factory=list)
    model: str = ""


def document_date(metadata: dict[str, Any]) -> str:
    """A date the LLM can read: the document's modification time, else its version string."""
    modified = metadata.get("modified_time")
    if isinstance(modified, (int, float)) and modified > 0:
        return datetime.fromtimestamp(modified, timezone.utc).strftime("%Y-%m-%d")
    return str(metadata.get(DOC_VERSION) or "")


class Consolidator:
    def __init__(self, source: Any, knowledge: Any, *, thresholds: stage1.Thresholds = stage1.Thresholds(),
                 backend: Callable[[], Backend] | None = None, retries: int = 2, token_budget: int | None = None,
                 dense: DenseFn | None = None, sparse: SparseFn | None = None, batch: int = 1000) -> None:
        self.source = source
        self.knowledge = knowledge
        self.thresholds = thresholds
        self.backend_factory = backend
        self.retries = retries
        self.token_budget = token_budget
        self.dense = dense
        self.sparse = sparse
        self.batch = batch

    def run(self, *, dry_run: bool = False) -> PassReport:
        report = PassReport(self.source.name, self.knowledge.name if self.knowledge is not None else "", dry_run)
        started = time.perf_counter()
        found = stage1.find_candidates(self.source, self.thresholds)
        report.stage1_seconds = time.perf_counter() - started
        report.chunks, report.copy_clusters = len(found.chunks), len(found.clusters)
        report.candidate_pairs, report.settled_in_stage1 = found.candidate_pairs, found.settled_pairs
        report.llm_pairs = len(found.ambiguous)
        existing = kn.stored_metadata(self.knowledge) if self.knowledge is not None else {}

        groups = [self._copy_group(c) for c in found.clusters]
        members_of = {c.representative: c.members for c in found.clusters}
        questions, pending = [], {}
        for pair in found.ambiguous:
            side_a, side_b = members_of.get(pair.a, [pair.a]), members_of.get(pair.b, [pair.b])
            group_id = kn.knowledge_id("pair", side_a + side_b)
            cached = existing.get(group_id)
            if cached is not None and cached.get(kn.PROMPT_VERSION) == PROMPT_VERSION:
                groups.append(_cached_group(group_id, side_a + side_b, cached))
                report.reused += 1
                continue
            pending[group_id] = (pair, side_a, side_b)
        if pending:
            started = time.perf_counter()
            records = self._records(sorted({x for pair, _, _ in pending.values() for x in (pair.a, pair.b)}))
            for group_id, (pair, _, _) in pending.items():
                questions.append((group_id, messages(_passage(records[pair.a]), _passage(records[pair.b]))))
            runner = Runner(self.backend_factory(), retries=self.retries, token_budget=self.token_budget) \
                if self.backend_factory else None
            if runner is None:
                for group_id, (_, side_a, side_b) in pending.items():
                    report.failed[group_id] = "not asked: no LLM is configured"
                    report.rows.append(Row(self._label(found, side_a + side_b), "undecided",
                                           "no LLM is configured", "-", group_id))
            else:
                report.model = runner.backend.model
                for asked in runner.ask_all(questions):
                    pair, side_a, side_b = pending[asked.key]
                    report.asked += 1 if asked.decision is not None or asked.attempts else 0
                    if asked.decision is None:
                        report.failed[asked.key] = asked.error or "no decision"
                        report.rows.append(Row(self._label(found, side_a + side_b), "failed", asked.error or "", "llm",
                                               asked.key))
                        continue
                    groups.append(self._pair_group(asked.key, pair, side_a, side_b, asked.decision, runner.backend.model))
                report.llm_calls = runner.tokens.calls
                report.prompt_tokens, report.completion_tokens = runner.tokens.prompt, runner.tokens.completion
            report.stage2_seconds = time.perf_counter() - started

        for group in groups:
            report.rows.append(Row(self._label(found, group.members), group.decision, group.reason, group.method, group.id))
        if dry_run or self.knowledge is None:
            return report
        self._apply(found, groups, existing, report)
        kn.record_pass(self.knowledge, report.to_json())
        return report

    # Planning ----------------------------------------------------------------------------------

    @staticmethod
    def _copy_group(cluster: stage1.Cluster) -> _Group:
        methods = sorted(cluster.methods)
        return _Group(kn.knowledge_id("copies", cluster.members), list(cluster.members), "duplicate",
                      f"copies found by {' and '.join(methods)} comparison, no LLM needed", "+".join(methods),
                      1.0, text_from=cluster.representative)

    def _pair_group(self, group_id: str, pair: stage1.Pair, side_a: list[str], side_b: list[str],
                    decision: Decision, model: str) -> _Group:
        group = _Group(group_id, side_a + side_b, decision.decision, decision.reason, "llm", pair.similarity, model=model)
        if decision.decision == "duplicate":
            group.text_from = pair.a
        elif decision.decision == "supersedes":
            newer, older = (side_a, side_b) if decision.newer == "A" else (side_b, side_a)
            group.newer, group.superseded, group.text_from = newer, older, newer[0]
        elif decision.decision == "complementary":
            group.new_text = decision.merged_text
        elif decision.decision == "conflicting":
            records = self._records([pair.a, pair.b])
            group.new_text = "\n\n---\n\n".join(records[x][0] for x in (pair.a, pair.b))
        else:  # unrelated: the record only remembers the answer, so the pair is not asked again
            group.text_from = pair.a
        return group

    def _label(self, found: stage1.Stage1Result, members: Sequence[str]) -> str:
        uris = [found.chunks[m].uri if m in found.chunks else m for m in members]
        shown = " + ".join(uris[:3])
        return shown + (f" (+{len(uris) - 3})" if len(uris) > 3 else "")

    def _records(self, ids: Sequence[str]) -> dict[str, tuple[str, list[float], dict[str, Any]]]:
        out = {}
        for start in range(0, len(ids), self.batch):
            got = self.source.get(ids=list(ids[start:start + self.batch]), include=["documents", "embeddings", "metadatas"])
            for record_id, text, embedding, metadata in zip(got["ids"], got["documents"], got["embeddings"],
                                                            got["metadatas"]):
                out[record_id] = (text or "", [float(x) for x in embedding], metadata or {})
        return out

    # Applying ----------------------------------------------------------------------------------

    def _apply(self, found: stage1.Stage1Result, groups: list[_Group], existing: dict[str, dict[str, Any]],
               report: PassReport) -> None:
        wanted = {g.id: g for g in groups}
        new = [g for g in groups if g.id not in existing]
        if new:
            kn.write(self.knowledge, self._build(found, new), self.batch)
        report.written = len(new)
        orphans = sorted(set(existing) - set(wanted))
        kn.delete(self.knowledge, orphans, self.batch)
        report.removed = len(orphans)

        pointers: dict[str, list[str]] = {}
        for group in groups:
            if group.decision in kn.SEARCHABLE:
                for member in group.members:
                    pointers.setdefault(member, []).append(group.id)
        changes: dict[str, list[str] | None] = {}
        for chunk_id, ref in found.chunks.items():
            now = sorted(pointers.get(chunk_id, []))
            if tuple(now) != tuple(sorted(ref.knowledge)):
                changes[chunk_id] = now or None
        report.pointers_changed = kn.point(self.source, changes, self.batch)

    def _build(self, found: stage1.Stage1Result, groups: list[_Group]) -> list[kn.KnowledgeRecord]:
        reused = self._records(sorted({g.text_from for g in groups if g.text_from} | {m for g in groups for m in g.members}))
        fresh = [g for g in groups if g.new_text is not None]
        dense = self.dense([g.new_text for g in fresh]) if fresh and self.dense else []  # type: ignore[misc]
        sparse = self.sparse([g.new_text for g in fresh]) if fresh and self.sparse else []  # type: ignore[misc]
        vectors = {g.id: (list(map(float, d)), s) for g, d, s in zip(fresh, dense, sparse or [None] * len(fresh))}
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        out = []
        for group in groups:
            members = [m for m in group.members if m in reused]
            if not members:
                continue  # every chunk behind it went away during the pass
            if group.new_text is not None:
                if group.id not in vectors:
                    log.warning("knowledge %s left out: no dense model to embed its new text", group.id)
                    continue
                text = group.new_text
                embedding, sparse_vector = vectors[group.id]
            else:
                source_id = group.text_from if group.text_from in reused else members[0]
                text, embedding, source_meta = reused[source_id]
                sparse_vector = source_meta.get(SPARSE)
            metas = [reused[m][2] for m in members]
            metadata: dict[str, Any] = {
                kn.KIND: kn.KIND_KNOWLEDGE, kn.DECISION: group.decision, kn.REASON: group.reason[:400],
                kn.METHOD: group.method, kn.MODEL: group.model or None, kn.SIMILARITY: round(group.similarity, 4),
                kn.CHUNK_IDS: members, kn.URIS: [str(m.get(URI, "")) for m in metas],
                kn.SOURCES: [str(m.get(SOURCE_ID, "")) for m in metas],
                kn.VERSIONS: [str(m.get(DOC_VERSION, "")) for m in metas],
                kn.NEWER: [m for m in group.newer if m in reused] or None,
                kn.SUPERSEDED: [m for m in group.superseded if m in reused] or None,
                kn.CONFLICTING: group.decision == "conflicting", kn.DECIDED_AT: now,
                kn.PROMPT_VERSION: PROMPT_VERSION if group.method == "llm" else None,
                SPARSE: sparse_vector,
            }
            out.append(kn.KnowledgeRecord(group.id, text, embedding, {k: v for k, v in metadata.items() if v is not None}))
        return out


def _cached_group(group_id: str, members: list[str], metadata: dict[str, Any]) -> _Group:
    return _Group(group_id, members, str(metadata.get(kn.DECISION)), str(metadata.get(kn.REASON, "")),
                  "llm (earlier pass)", float(metadata.get(kn.SIMILARITY, 0.0)), model=str(metadata.get(kn.MODEL, "")))


def _passage(record: tuple[str, list[float], dict[str, Any]]) -> Passage:
    text, _, metadata = record
    return Passage(body(text), str(metadata.get(URI, "")), document_date(metadata))

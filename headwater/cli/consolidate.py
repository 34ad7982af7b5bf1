"""`headwater consolidate` and `headwater query --knowledge`."""

from __future__ import annotations

import json
import textwrap
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from headwater.cli.common import ChromaPathOpt, CollectionOpt, cli_settings, fail, out
from headwater.errors import HeadwaterError


def consolidate(collection: CollectionOpt = None, chroma_path: ChromaPathOpt = None,
                dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what it would decide; write nothing.")] = False,
                token_budget: Annotated[Optional[int], typer.Option("--token-budget", metavar="TOKENS", min=1,
                                                                     help="Most LLM tokens this run may spend.")] = None,
                as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False) -> None:
    """Find duplicate, superseded and overlapping chunks across sources; keep the knowledge collection."""
    from headwater.consolidation.stage import consolidate as run_pass

    try:
        report = run_pass(cli_settings(collection, chroma_path), dry_run=dry_run, token_budget=token_budget)
    except (HeadwaterError, ValueError) as exc:
        fail(exc)
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
        return
    table = Table("cluster", "decision", "reason", title=f"{report.collection} -> {report.knowledge_collection}"
                  + (" (dry run)" if dry_run else ""))
    for row in report.rows:
        table.add_row(row.cluster, row.decision, row.reason)
    out.print(table)
    out.print(f"{report.chunks} chunks; {report.candidate_pairs} candidate pairs, {report.settled_in_stage1} settled "
              f"without the LLM, {report.llm_pairs} for the LLM ({report.reused} decided earlier, "
              f"{report.llm_calls} calls, {report.prompt_tokens + report.completion_tokens} tokens"
              + (f", model {report.model}" if report.model else "") + ")")
    if not dry_run:
        out.print(f"knowledge: {report.written} written, {report.removed} removed; "
                  f"{report.pointers_changed} source chunks re-pointed")
    for group, reason in report.failed.items():
        out.print(f"[yellow]not decided[/yellow] {group}: {reason}")


def search_knowledge(settings: Any, text: str, k: int) -> list[dict[str, Any]]:
    """Dense search over the knowledge collection's searchable records."""
    from headwater.store.chroma_store import make_client
    from headwater.consolidation import knowledge as kn
    from headwater.consolidation.config import ConsolidationSettings
    from headwater.errors import ConfigurationError
    from headwater.pipeline.dense_source import dense_embedder

    name = ConsolidationSettings().knowledge_name(settings.collection)
    try:
        collection = make_client(settings).get_collection(name, embedding_function=None)
    except Exception:  # noqa: BLE001
        raise ConfigurationError(f"there is no knowledge collection {name!r} yet; run `headwater consolidate` first") from None
    vector = dense_embedder(settings, settings.model_threads or 1).embed([text])[0]
    found = collection.query(query_embeddings=[list(map(float, vector))], n_results=k,
                             where={kn.DECISION: {"$in": list(kn.SEARCHABLE)}},
                             include=["documents", "metadatas", "distances"])
    return [{"id": i, "text": t, "distance": d, **m}
            for i, t, m, d in zip(found["ids"][0], found["documents"][0], found["metadatas"][0], found["distances"][0])]


def print_knowledge_hits(hits: list[dict[str, Any]], as_json: bool) -> None:
    from headwater.consolidation import knowledge as kn

    if as_json:
        print(json.dumps([{k: v for k, v in h.items() if k != "sparse_vector"} for h in hits], indent=2))
        return
    for rank, hit in enumerate(hits, 1):
        out.print(f"[bold]{rank}. {hit[kn.DECISION]}[/bold]  distance {hit['distance']:.4f}  from "
                  + ", ".join(hit.get(kn.URIS, [])))
        out.print("   " + textwrap.shorten(" ".join(hit["text"].split()), 300, placeholder=" …"))

"""`headwater push`: promote an embedded collection to a Chroma server or Chroma Cloud (headwater.store.promotion)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from headwater.cli.common import err, fail, out
from headwater.errors import HeadwaterError


def push(from_path: Annotated[Path, typer.Option("--from-path", metavar="PATH", help="The embedded Chroma directory to copy from.")],
         collection: Annotated[str, typer.Option("--collection", metavar="NAME", help="The collection to copy.")],
         to: Annotated[str, typer.Option("--to", metavar="HOST[:PORT]|cloud", help="HOST[:PORT] of a Chroma server, or `cloud` for Chroma Cloud.")],
         to_collection: Annotated[Optional[str], typer.Option(
             "--to-collection", metavar="NAME", help="Name at the target (default: the same name).")] = None,
         token: Annotated[Optional[str], typer.Option(
             "--token", envvar="HEADWATER_CHROMA_TOKEN", show_default=False,
             help="Bearer token for a proxy in front of the server (prefer the environment variable: a command line is visible to other users).")] = None,
         cloud_api_key: Annotated[Optional[str], typer.Option(
             "--cloud-api-key", metavar="KEY", envvar="HEADWATER_CHROMA_CLOUD_API_KEY", show_default=False,
             help="Chroma Cloud API key, with --to cloud (prefer the environment variable).")] = None,
         cloud_tenant: Annotated[Optional[str], typer.Option("--cloud-tenant", metavar="TENANT", envvar="HEADWATER_CHROMA_CLOUD_TENANT", help="Chroma Cloud tenant (default: the API key's).")] = None,
         cloud_database: Annotated[Optional[str], typer.Option(
             "--cloud-database", metavar="DATABASE", envvar="HEADWATER_CHROMA_CLOUD_DATABASE", help="Chroma Cloud database (default: the API key's).")] = None,
         batch_size: Annotated[Optional[int], typer.Option(
             "--batch-size", metavar="N", min=1, help="Records per write (capped by the target's own limit).")] = None,
         prune: Annotated[bool, typer.Option(
             "--prune", help="Delete records the target holds that the source no longer does.")] = False) -> None:
    """Copy an embedded collection (records, vectors, metadata, sparse vectors, manifest) to a server or Cloud.

    Nothing is re-embedded. Run it again after an interruption: it resumes, writing only what the
    target lacks or holds differently. Refuses a target collection written by other models.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from headwater.store.promotion import Target, push as run_push
    from headwater.retrieval.write_log import write_log_if_reachable
    from headwater.settings import load_settings

    try:
        if to == "cloud":
            target = Target.parse(to, cloud_api_key=cloud_api_key, cloud_tenant=cloud_tenant,
                                  cloud_database=cloud_database)
        else:
            target = Target.parse(to, token=token)
        write_log = write_log_if_reachable(load_settings().redis_url.get_secret_value(), to_collection or collection)
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=err, disable=not err.is_terminal) as bars:
            task = bars.add_task("records", total=None)
            report = run_push(from_path, collection, target, to_collection, batch_size=batch_size, prune=prune,
                              observers=[write_log] if write_log else [],
                              progress=lambda done, total: bars.update(task, completed=done, total=total))
    except (HeadwaterError, ValueError) as exc:
        fail(exc)
    out.print(f"pushed {report.collection} to {target.describe()} as {report.target_collection}: "
              f"{report.copied} records written, {report.already_there} already there, "
              f"{report.manifest_copied} manifest entries, {report.pruned} pruned; "
              f"verified {report.target_records} records and a sample of {report.sampled} "
              f"(batches of at most {report.batch_limit})")


COMMANDS = (push,)

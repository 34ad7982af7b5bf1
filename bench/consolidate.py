"""Consolidation stage 1 on the standard-library corpus: chunks/s, and how many candidate pairs it
settles without the LLM.

The corpus: a few standard-library packages synced into an embedded Chroma with the real models,
plus one package mirrored under a second folder (the same files in two places, the commonest
duplicate there is). Stage 1 then runs over the collection (a read of every chunk's text, vector
and metadata, MinHash/LSH, and a dense-neighbour query per chunk against Chroma's index) and is
timed alone; the sync that builds the corpus is not part of the figure.

Reported: chunks, stage-1 wall and CPU seconds, chunks/s (wall and per CPU second), candidate
pairs, the share settled without the LLM, pairs left for the LLM, copy groups, and the peak RSS
growth of the pass. The corpus is source code, which stage 2 leaves out by default (copies only),
so a last run reads it as prose (`code_to_llm`) to show how many pairs the LLM would get there.
The load average is printed next to the figures: the machine is shared.

Run: ``python -m bench.consolidate [--packages ...] [--mirror json,http] [--repeat 3] [--keep | --reuse DIR]``
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import time
from pathlib import Path

from bench.scratch import scratch_directory
from bench.stdlib_corpus import copy_packages


def load() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packages", default="json,email,http,logging,urllib")
    parser.add_argument("--mirror", default="json,http", help="packages copied a second time under mirror/")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--reuse", type=Path, help="a directory a --keep run left: skips building the corpus")
    args = parser.parse_args()

    from connectors.folder import FolderConnector
    from headwater.consolidation.config import ConsolidationSettings
    from headwater.consolidation.stage1 import find_candidates
    from headwater.sync.embedded import open_engine
    from headwater.settings import Settings

    reuse = contextlib.nullcontext(args.reuse) if args.reuse else scratch_directory("hw-consolidate-bench-", args.keep)
    with reuse as base:
        corpus = base / "corpus"
        if not args.reuse:
            copy_packages(corpus, tuple(args.packages.split(",")))
            for package in filter(None, args.mirror.split(",")):
                shutil.copytree(corpus / package, corpus / "mirror" / package)
        files = sum(1 for _ in corpus.rglob("*.py"))
        settings = Settings(chroma_path=base / "chroma", collection="stdlib")
        started = time.perf_counter()
        with open_engine(settings) as engine:
            engine.sync(FolderConnector("stdlib", corpus))
            collection = engine.store.collection
            print(f"corpus: {files} files, {collection.count()} chunks, synced in "
                  f"{time.perf_counter() - started:.0f} s ({load()})")
            default = ConsolidationSettings().thresholds()
            # The same corpus read as if it were prose: similar functions sent to the LLM too.
            as_prose = ConsolidationSettings(code_to_llm=True).thresholds()
            for run, thresholds in enumerate([default] * args.repeat + [as_prose]):
                if thresholds is as_prose:
                    print("with HEADWATER_CONSOLIDATE_CODE_TO_LLM=true (code pairs to the LLM, as prose):")
                rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                cpu, wall = time.process_time(), time.perf_counter()
                found = find_candidates(collection, thresholds)
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                rss_growth = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
                chunks = len(found.chunks)
                share = found.settled_pairs / found.candidate_pairs if found.candidate_pairs else 1.0
                print(f"run {run + 1}: {chunks} chunks in {wall:.2f} s wall / {cpu:.2f} s CPU: "
                      f"{chunks / wall:.0f} chunks/s wall, {chunks / cpu:.0f} per CPU second; "
                      f"{found.candidate_pairs} candidate pairs, {found.settled_pairs} settled without the LLM "
                      f"({share:.1%}), {len(found.ambiguous)} pairs for the LLM; {len(found.clusters)} copy groups "
                      f"holding {sum(len(c.members) for c in found.clusters)} chunks; peak RSS +{rss_growth:.0f} MB "
                      f"({load()})")
            bands = [0.70, 0.75, 0.80, 0.85, 0.90, 0.95, 1.01]
            counts = [sum(lo <= p.similarity < hi for p in found.ambiguous) for lo, hi in zip(bands, bands[1:])]
            print("pairs for the LLM by similarity: " + ", ".join(
                f"[{lo:.2f}, {min(hi, 1.0):.2f}): {n}" for lo, hi, n in zip(bands, bands[1:], counts))
                + "; found by " + ", ".join(f"{m} {sum(p.found_by == m for p in found.ambiguous)}" for m in ("dense", "minhash")))


if __name__ == "__main__":
    main()

"""Every Redis key the fleet uses, spelled in this one place.

    headwater:run:{run}                 HASH  the run record: status, source, seq, target, counters,
                                              truncated (a crawl max_pages cut short)
    headwater:run:{run}:source          STR   the source spec (kind, id, options); lives as long as the run
    headwater:run:{run}:docs            HASH  uri -> state (queued, fetch, parse, embed, write, or terminal)
    headwater:run:{run}:changes         HASH  uri -> the DocumentChange that put it in the run
    headwater:run:{run}:todo            LIST  uris waiting for a place in the run's window
    headwater:run:{run}:active          SET   uris admitted into the pipeline and not yet terminal
    headwater:run:{run}:gone            LIST  uris the listing no longer has (deleted when the run finishes)
    headwater:run:{run}:errors          HASH  uri -> why it failed ("(source)" for the run itself)
    headwater:run:{run}:notes           HASH  uri -> how it ended: why it was skipped; added, updated, moved
                                        from/to URI (headwater.pipeline.decisions)
    headwater:run:{run}:warnings        HASH  uri -> what went wrong without stopping it (a parser's error
                                              when its text was indexed as plain text instead)
    headwater:run:{run}:removed         HASH  uri -> content hash of a document the run removed (rename pairing)
    headwater:run:{run}:claims          HASH  uri -> the document claim this run holds for it
    headwater:run:{run}:doc:{h}:{part}  STR/HASH  in-flight payloads: bytes, plan, dense, sparse
    headwater:leases                    ZSET  lease member -> deadline (one per pending step)
    headwater:lease:{holders,deliveries,attempts,redrives,weights}  HASH  lease member -> value
    headwater:col:{collection}:due:{step}         ZSET  "run<US>uri" waiting for a batch of a batched step
                                                        (dense, sparse, write) -> when it is due
    headwater:col:{collection}:due:{step}:weight  STR   the texts (embedding) or documents (write) queued there
    headwater:col:{collection}:due:{step}:later   STR   set while a delayed batch task is on its way
    headwater:runs / source:{id}:runs   ZSET  run ids by creation time (all; per source)
    headwater:source:{id}:seq           STR   run numbering per source
    headwater:source:{id}:written-by    HASH  uri -> seq of the newest run that wrote it
    headwater:source:{id}:latest        HASH  uri -> order key of the newest live change accepted
    headwater:source:{id}:written-order HASH  uri -> order key of the newest live change written
    headwater:source:{id}:{latest,written-order}:{space}  HASH  the same, for changes of another order
                                        space (S3 sequencers), never compared with the default space's
    headwater:source:{id}:skipped       HASH  uri -> version that was skipped (not read again unchanged)
    headwater:source:{id}:crawl-pages   HASH  url -> a web page's validators, version and links (headwater.fleet.crawl)
    headwater:source:{id}:crawl-robots  HASH  host -> the robots.txt a web run's listing read
    headwater:source:{id}:crawl-lastmod HASH  url -> the lastmod a web run's listing read from the sitemaps
    headwater:source:{id}:crawl-queries SET   "path\nquery" the run's crawl took (its query-variant budget)
    headwater:source:{id}:crawl-query-counts  HASH  path -> how many query strings of it the run took
    headwater:crawl:host:{host}:last    STR   when the last request to a web host started (shared pacing)
    headwater:crawl:host:{host}:delay   STR   the host's adaptive delay (connectors.web_politeness)
    headwater:run:{run}:depth           HASH  uri -> links away from a seed, for a crawl's max_depth
    headwater:vec:{model}:{hash}        STR   vector cache by model identity and chunk content hash

A lease member names one pending step of one document: "run<US>step<US>uri" (US = \\x1f); run-level
steps (list, finish) use an empty uri.
"""

from __future__ import annotations

import hashlib

PREFIX = "headwater:"
SEP = "\x1f"

LEASES = PREFIX + "leases"
HOLDERS = PREFIX + "lease:holders"
DELIVERIES = PREFIX + "lease:deliveries"
ATTEMPTS = PREFIX + "lease:attempts"
REDRIVES = PREFIX + "lease:redrives"
WEIGHTS = PREFIX + "lease:weights"  # how much a batched step's document adds to its batch
ALL_RUNS = PREFIX + "runs"
SWEEP_LOCK = PREFIX + "sweep-lock"
WORKERS = PREFIX + "workers"  # worker name -> its last heartbeat (headwater.fleet.worker_registry)
LOSSES_SEEN = PREFIX + "workers:losses-seen"  # worker name -> the heartbeat of its loss the sweeper acted on
EMBEDDED_TEXTS = PREFIX + "stats:embedded-texts"  # texts that went through a model, all runs, per side
STAGE_SECONDS = PREFIX + "stats:stage-seconds"  # stage -> seconds workers spent in it (headwater.fleet.stage_costs)
STAGE_DOCUMENTS = PREFIX + "stats:stage-documents"  # stage -> documents it handled
STAGE_CPU_SECONDS = PREFIX + "stats:stage-cpu-seconds"  # stage -> CPU seconds of the threads that ran it


def run(run_id: str, part: str = "") -> str:
    return f"{PREFIX}run:{run_id}" + (f":{part}" if part else "")


def doc_payload(run_id: str, uri: str, part: str) -> str:
    """An in-flight payload of one document of one run (bytes, plan, dense, sparse)."""
    return f"{PREFIX}run:{run_id}:doc:{uri_hash(uri)}:{part}"


def uri_hash(uri: str) -> str:
    return hashlib.sha1(uri.encode("utf-8", "surrogatepass")).hexdigest()[:20]


def source(source_id: str, part: str) -> str:
    return f"{PREFIX}source:{source_id}:{part}"


def due(collection: str, step: str) -> str:
    """Documents of a collection waiting for a batch of one batched step (dense, sparse, write)."""
    return f"{PREFIX}col:{collection}:due:{step}"


def document_claim(collection: str, source_id: str, uri: str) -> str:
    """Held by the one run that is working on a document now (runs of a document never interleave)."""
    return f"{PREFIX}col:{collection}:claim:{uri_hash(source_id + SEP + uri)}"


def vector_cache(model: str, content_hash: str) -> str:
    return f"{PREFIX}vec:{model}:{content_hash}"


def crash_point(name: str) -> str:
    return f"{PREFIX}test:crash:{name}"


def worker_steps(name: str) -> str:
    """A worker's pool processes -> the step each is running."""
    return f"{PREFIX}worker:{name}:steps"


def member(run_id: str, step: str, uri: str = "") -> str:
    """The lease member of one pending step."""
    return f"{run_id}{SEP}{step}{SEP}{uri}"


def split_member(value: str) -> tuple[str, str, str]:
    run_id, step, uri = value.split(SEP, 2)
    return run_id, step, uri


def due_entry(run_id: str, uri: str) -> str:
    return f"{run_id}{SEP}{uri}"

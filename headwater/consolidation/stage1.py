"""Stage 1, no LLM: exact copies by normalised hash, near copies by MinHash/LSH and by dense similarity.

One streaming read of the collection, a page at a time. Per chunk, only small things are kept (ids,
a few metadata fields, a normalised hash and a MinHash signature of `num_perm` integers); texts and
vectors are dropped with their page. Dense neighbours come from Chroma's own index: each page's
stored vectors are sent back as queries, so no vector matrix is ever built here.

Every pair some detector proposes is a candidate. Stage 1 settles a candidate when it can: the two
chunks are copies (one cluster), or the proposal does not hold up (a MinHash collision whose
signatures disagree, far apart in meaning). Only pairs that are related but not copies (dense
similarity between the two thresholds, or shared wording with different numbers or dates) go to the
LLM, once per pair of clusters.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from headwater.store.chroma_store import CONTENT_HASH, DOC_VERSION, SOURCE_ID, URI
from headwater.consolidation import text as texts
from headwater.consolidation.knowledge import KNOWLEDGE_IDS
from headwater.pipeline.code_chunks import CODE_SUFFIXES

PAGE = 500
EXACT, MINHASH, DENSE = "exact", "minhash", "dense"


@dataclass(frozen=True)
class Thresholds:
    minhash: float = 0.8  # estimated Jaccard of word 3-shingles at or above which two texts are near copies
    dense_copy: float = 0.95  # cosine similarity at or above which two chunks are copies
    dense_related: float = 0.75  # cosine similarity from which a pair is worth asking the LLM about
    llm_pairs_per_chunk: int = 3  # a chunk's most similar related pairs that go to the LLM; the rest are settled here
    code_to_llm: bool = False  # source code is consolidated as copies only: two similar functions are not one fact
    neighbours: int = 8  # dense neighbours looked at per chunk
    num_perm: int = 128  # MinHash permutations: 128 integers per chunk (an estimate within ~0.03)


@dataclass(frozen=True)
class ChunkRef:
    """What stage 1 keeps of one chunk."""

    id: str
    source_id: str
    uri: str
    doc_version: str
    content_hash: str
    normalised_hash: str
    numbers: tuple[str, ...]
    knowledge: tuple[str, ...] = ()  # the knowledge records it points to now
    code: bool = False  # a source file chunked along its syntax


    @property
    def document(self) -> tuple[str, str]:
        return self.source_id, self.uri


@dataclass
class Cluster:
    """Chunks stage 1 found to be copies of each other (or a single chunk), and how."""

    members: list[str]
    methods: set[str] = field(default_factory=set)

    @property
    def representative(self) -> str:
        return self.members[0]


@dataclass(frozen=True)
class Pair:
    """Two clusters (by representative) that are related but not copies: the LLM's to decide."""

    a: str
    b: str
    similarity: float  # dense cosine similarity, or estimated Jaccard when found by MinHash
    found_by: str


@dataclass
class Stage1Result:
    chunks: dict[str, ChunkRef]
    clusters: list[Cluster]  # clusters of two or more chunks
    ambiguous: list[Pair]
    candidate_pairs: int  # distinct cross-document chunk pairs any detector proposed
    settled_pairs: int  # of those, settled here (copies, or dismissed)

    def cluster_of(self) -> dict[str, Cluster]:
        return {member: cluster for cluster in self.clusters for member in cluster.members}


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}
        self.methods: dict[str, set[str]] = {}

    def find(self, x: str) -> str:
        root = x
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while self.parent.get(x, x) != root:  # path compression keeps later finds short
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a: str, b: str, method: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            ra, rb = min(ra, rb), max(ra, rb)
            self.parent[rb] = ra
            self.methods.setdefault(ra, set()).update(self.methods.pop(rb, set()))
        self.methods.setdefault(ra, set()).add(method)


def read_pages(collection: Any, page: int = PAGE) -> Iterator[dict[str, Any]]:
    """Every record with its text, vector and metadata, a page at a time."""
    offset = 0
    while True:
        batch = collection.get(include=["documents", "embeddings", "metadatas"], limit=page, offset=offset)
        if not batch["ids"]:
            return
        yield batch
        offset += len(batch["ids"])


def similarity_from_distance(space: str, distance: float) -> float:
    """Cosine similarity from Chroma's distance (MiniLM vectors are unit length)."""
    if space == "l2":
        return 1.0 - distance / 2.0
    return 1.0 - distance  # cosine and ip


def collection_space(collection: Any) -> str:
    from headwater.store import hnsw

    found = hnsw.current(collection)
    return found.space if found else "l2"


def find_candidates(collection: Any, thresholds: Thresholds = Thresholds(), page: int = PAGE) -> Stage1Result:
    """Read the collection once and settle what stage 1 can."""
    from datasketch import LeanMinHash, MinHash, MinHashLSH

    space = collection_space(collection)
    chunks: dict[str, ChunkRef] = {}
    first_by_hash: dict[str, str] = {}
    signatures: dict[str, Any] = {}
    lsh = MinHashLSH(threshold=thresholds.minhash, num_perm=thresholds.num_perm)
    groups = _UnionFind()
    candidates: set[tuple[str, str]] = set()
    related: dict[tuple[str, str], tuple[float, str]] = {}  # pairs for the LLM, unless later found to be copies
    dense_edges: list[tuple[str, str, float]] = []

    def propose(a: str, b: str) -> tuple[str, str]:
        key = (a, b) if a < b else (b, a)
        candidates.add(key)
        return key

    for batch in read_pages(collection, page):
        for record_id, document, metadata in zip(batch["ids"], batch["documents"], batch["metadatas"]):
            metadata = metadata or {}
            document = document or ""
            normalised = texts.normalise(document)
            ref = ChunkRef(record_id, str(metadata.get(SOURCE_ID, "")), str(metadata.get(URI, "")),
                           str(metadata.get(DOC_VERSION, "")), str(metadata.get(CONTENT_HASH, "")),
                           texts.normalised_hash(document), texts.numbers(document),
                           tuple(metadata.get(KNOWLEDGE_IDS) or ()),
                           PurePosixPath(str(metadata.get(URI, ""))).suffix.lower() in CODE_SUFFIXES)
            chunks[record_id] = ref
            if not normalised:
                continue
            first = first_by_hash.get(ref.normalised_hash)
            if first is not None:  # an exact copy: no need to sketch it again
                if chunks[first].document != ref.document:
                    propose(first, record_id)
                    groups.union(first, record_id, EXACT)
                continue
            first_by_hash[ref.normalised_hash] = record_id
            sketch = MinHash(num_perm=thresholds.num_perm)
            sketch.update_batch(list(texts.shingles(normalised)))
            lean = LeanMinHash(sketch)
            for other in lsh.query(lean):
                if chunks[other].document == ref.document:
                    continue
                key = propose(other, record_id)
                jaccard = lean.jaccard(signatures[other])
                if jaccard < thresholds.minhash:
                    continue  # a collision of the sketch's bands: dismissed here (dense may still relate them)
                if chunks[other].numbers == ref.numbers:
                    groups.union(other, record_id, MINHASH)
                else:  # same wording, different numbers or dates: a version, not a copy
                    related[key] = max(related.get(key, (0.0, MINHASH)), (jaccard, MINHASH))
            lsh.insert(record_id, lean)
            signatures[record_id] = lean
        dense_edges.extend(_dense_neighbours(collection, batch, space, thresholds))

    for a, b, similarity in dense_edges:
        if a not in chunks or b not in chunks or chunks[a].document == chunks[b].document:
            continue
        key = propose(a, b)
        if similarity >= thresholds.dense_copy and chunks[a].numbers == chunks[b].numbers:
            groups.union(a, b, DENSE)
        elif similarity >= thresholds.dense_related:
            related[key] = max(related.get(key, (0.0, DENSE)), (similarity, DENSE))

    clusters = _clusters(groups)
    ambiguous: dict[tuple[str, str], Pair] = {}
    per_group: Counter[str] = Counter()
    sent_pairs = 0
    # Most similar first: each group's closest relations are the ones worth an LLM call.
    for (a, b), (similarity, found_by) in sorted(related.items(), key=lambda item: (-item[1][0], item[0])):
        ra, rb = groups.find(a), groups.find(b)
        if ra == rb:
            continue  # the two ended up copies of each other after all
        if not thresholds.code_to_llm and (chunks[a].code or chunks[b].code):
            continue
        key = (ra, rb) if ra < rb else (rb, ra)
        if key not in ambiguous:
            if max(per_group[ra], per_group[rb]) >= thresholds.llm_pairs_per_chunk:
                continue
            per_group[ra] += 1
            per_group[rb] += 1
            ambiguous[key] = Pair(key[0], key[1], similarity, found_by)
        sent_pairs += 1
    return Stage1Result(chunks, clusters, sorted(ambiguous.values(), key=lambda p: (p.a, p.b)),
                        len(candidates), len(candidates) - sent_pairs)


def _dense_neighbours(collection: Any, batch: dict[str, Any], space: str,
                      thresholds: Thresholds) -> Iterator[tuple[str, str, float]]:
    """(a, b, similarity) for each page record's nearest neighbours at or above the related threshold."""
    embeddings = batch.get("embeddings")
    if embeddings is None or len(embeddings) == 0:
        return
    found = collection.query(query_embeddings=[list(map(float, e)) for e in embeddings],
                             n_results=thresholds.neighbours + 1, include=["distances"])
    for record_id, ids, distances in zip(batch["ids"], found["ids"], found["distances"]):
        for other, distance in zip(ids, distances):
            similarity = similarity_from_distance(space, distance)
            if other != record_id and record_id < other and similarity >= thresholds.dense_related:
                yield record_id, other, similarity
            elif other != record_id and other < record_id and similarity >= thresholds.dense_related:
                yield other, record_id, similarity


def _clusters(groups: _UnionFind) -> list[Cluster]:
    members: dict[str, list[str]] = {}
    for record_id in list(groups.parent):
        members.setdefault(groups.find(record_id), []).append(record_id)
    for root in list(groups.methods):
        members.setdefault(root, [])
    out = []
    for root, rest in members.items():
        ids = sorted({root, *rest})
        if len(ids) > 1:
            out.append(Cluster(ids, set(groups.methods.get(root, set()))))
    return sorted(out, key=lambda c: c.representative)

"""Stage 1's rules on an embedded Chroma with hand-made vectors (no models)."""

from __future__ import annotations

import numpy as np
import pytest

from headwater.consolidation.stage1 import Thresholds, find_candidates

pytestmark = pytest.mark.timeout(120)


def _unit(v: np.ndarray) -> list[float]:
    return [float(x) for x in v / np.linalg.norm(v)]


def _near(base: np.ndarray, similarity: float, seed: int) -> list[float]:
    """A unit vector at about this cosine similarity to `base`."""
    rng = np.random.default_rng(seed)
    other = rng.normal(size=base.size)
    other -= other @ base * base
    other /= np.linalg.norm(other)
    return _unit(similarity * base + np.sqrt(1 - similarity ** 2) * other)


@pytest.fixture
def collection(tmp_path):
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    client = chromadb.PersistentClient(path=str(tmp_path), settings=ChromaSettings(anonymized_telemetry=False))
    return client.create_collection("stage1", embedding_function=None, configuration={"hnsw": {"space": "cosine"}})


def _add(collection, records):
    collection.add(ids=[r[0] for r in records], documents=[r[2] for r in records], embeddings=[r[3] for r in records],
                   metadatas=[{"source_id": "s", "uri": r[1], "content_hash": r[0]} for r in records])


def test_numbers_keep_versions_apart_and_code_stays_out_of_stage2(collection):
    rng = np.random.default_rng(1)
    base = _unit(rng.normal(size=32))
    words = "employees submit receipts for every expense above {} euros within {} days of purchase"
    code = np.array(_unit(rng.normal(size=32)))
    _add(collection, [
        ("a", "old.md", "old.md > Policy\n\n" + words.format(50, 30), base),
        ("b", "new.md", "new.md > Policy\n\n" + words.format(25, 14), _near(np.array(base), 0.97, 2)),
        ("c", "copy.md", "copy.md > Policy\n\n" + words.format(50, 30).upper(), _near(np.array(base), 0.99, 3)),
        ("d", "x.py", "x.py > f\n\ndef f(a):\n    return a + 1", list(code)),
        ("e", "y.py", "y.py > g\n\ndef g(b):\n    return b * 2", _near(code, 0.85, 4)),
    ])
    found = find_candidates(collection, Thresholds(neighbours=4), page=2)
    assert [c.members for c in found.clusters] == [["a", "c"]]  # same words, same numbers: a copy
    assert [(p.a, p.b) for p in found.ambiguous] == [("a", "b")]  # same words, other numbers: for the LLM
    assert found.settled_pairs == found.candidate_pairs - 2  # a~b and c~b both stand for the one LLM pair

    with_code = find_candidates(collection, Thresholds(neighbours=4, code_to_llm=True), page=2)
    assert ("d", "e") in {(p.a, p.b) for p in with_code.ambiguous}


def test_each_group_sends_at_most_its_closest_relations(collection):
    rng = np.random.default_rng(5)
    hub = np.array(_unit(rng.normal(size=32)))
    records = [("hub", "hub.md", "hub text about the topic", list(hub))]
    for n in range(6):
        records.append((f"r{n}", f"r{n}.md", f"related note number {'x' * (n + 1)} on its own", _near(hub, 0.90 - n * 0.02, 10 + n)))
    _add(collection, records)
    found = find_candidates(collection, Thresholds(neighbours=8, llm_pairs_per_chunk=2, dense_related=0.75))
    with_hub = sorted((p.a, p.b) for p in found.ambiguous if "hub" in (p.a, p.b))
    assert with_hub == [("hub", "r0"), ("hub", "r1")]
    assert all(sum(x in (p.a, p.b) for p in found.ambiguous) <= 2 for x in ("hub", *(f"r{n}" for n in range(6))))

"""bench.retrieval's scoring: ranks over distinct documents from a window that holds K of them; the paired bootstrap."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from bench import retrieval_sets
from bench.retrieval import (DEPTH, K, first_relevant_rank, module_answers, paired_bootstrap, query_ranks,
                             ranked_documents, scored_parts)


@dataclass
class Hit:
    uri: str


class RankedChunks:
    """A searcher over a fixed ranking of chunks (their documents' uris), recording each window asked for."""

    def __init__(self, uris: list[str]) -> None:
        self.uris = uris
        self.windows: list[int] = []

    def search(self, query: str, k: int, mode: str, **fusion: float) -> list[Hit]:
        self.windows.append(k)
        return [Hit(uri) for uri in self.uris[:k]]


def test_a_document_below_a_long_documents_chunks_keeps_its_rank():
    # 60 chunks from three long files fill the first window; the answer is the fourth document.
    ranking = [f"long{n % 3}.py" for n in range(60)] + ["answer.py"] + [f"other{n}.py" for n in range(20)]
    searcher = RankedChunks(ranking)
    assert query_ranks(searcher, {"a need": {"answer.py"}}, "dense") == [4]
    assert searcher.windows == [DEPTH, 4 * DEPTH]


def test_a_window_holding_k_documents_is_read_once():
    searcher = RankedChunks([f"doc{n}.py" for n in range(3 * DEPTH)])
    assert len(set(ranked_documents(searcher, "a need", "hybrid"))) >= K
    assert searcher.windows == [DEPTH]


def test_a_collection_with_fewer_chunks_than_the_window_ends_the_search():
    searcher = RankedChunks(["a.py", "a.py", "b.py"])
    assert ranked_documents(searcher, "a need", "sparse") == ["a.py", "a.py", "b.py"]
    assert searcher.windows == [DEPTH]


def test_rank_counts_documents_not_chunks_and_stops_at_k():
    assert first_relevant_rank(["a.py", "a.py", "b.py", "c.py"], {"c.py"}) == 3
    assert first_relevant_rank([f"d{n}.py" for n in range(K)] + ["late.py"], {"late.py"}) is None
    assert first_relevant_rank(["docs/x.md"], {"docs"}) == 1  # any file of a listed folder


def test_a_change_every_query_shares_is_better_with_a_tight_interval():
    before, after = [2] * 40, [1] * 40  # every query moves from rank 2 to rank 1
    change = paired_bootstrap(before, after)
    assert change.mrr == pytest.approx(0.5)
    assert change.low == pytest.approx(0.5) and change.high == pytest.approx(0.5)
    assert change.telling == "better"


def test_one_query_moving_among_forty_is_within_noise():
    before = [1] * 39 + [None]
    after = [1] * 38 + [2, 2]  # one query fell from rank 1 to 2 (-0.5), another was found at rank 2 (+0.5)
    change = paired_bootstrap(before, after)
    assert change.mrr == pytest.approx(0.0)
    assert change.low < 0 < change.high
    assert change.telling == "within noise"


def test_a_loss_on_most_queries_is_worse_and_the_interval_is_repeatable():
    before = [1] * 30 + [3] * 10
    after = [2] * 30 + [3] * 10
    change = paired_bootstrap(before, after)
    assert change.high < 0 and change.telling == "worse"
    assert paired_bootstrap(before, after) == change  # fixed seed: the same ranks print the same interval


def test_the_bootstrap_refuses_unpaired_lists():
    with pytest.raises(ValueError):
        paired_bootstrap([1, 2], [1])


def test_each_part_of_a_set_is_scored_on_its_own_queries():
    queries = ["first a", "first b", "added a"]
    parts = ({"first a": "x", "first b": "y"}, {"added a": "z"})
    ranks = {mode: [1, None, 2] for mode in ("dense", "sparse", "hybrid")}
    later = {mode: [1, 1, 1] for mode in ("dense", "sparse", "hybrid")}
    rows = scored_parts("corpus", queries, parts, ranks, later)
    assert len(rows) == 6
    assert rows[0].startswith("| corpus | part 1: 2 | dense | 0.500 → 1.000 | +0.500")
    assert rows[3].startswith("| corpus | part 2: 1 | dense | 0.500 → 1.000 | +0.500")


def test_a_set_may_name_one_module_or_several():
    assert module_answers({"a": "csv", "b": ("posixpath", "genericpath")}) == {"a": ("csv",), "b": ("posixpath", "genericpath")}


@pytest.mark.parametrize("reported, added, dev", [
    (retrieval_sets.STDLIB_DOCS, retrieval_sets.STDLIB_DOCS_ADDED, retrieval_sets.STDLIB_DOCS_DEV),
    (retrieval_sets.CLICK_SOURCE, retrieval_sets.CLICK_SOURCE_ADDED, retrieval_sets.CLICK_SOURCE_DEV),
])
def test_added_needs_are_new_and_never_in_a_dev_set(reported, added, dev):
    assert not set(added) & set(reported)
    assert not set(added) & set(dev)


def test_added_stdlib_needs_are_answered_by_modules_no_other_set_uses():
    used = {module for needs in (retrieval_sets.STDLIB_DOCS, retrieval_sets.STDLIB_DOCS_DEV)
            for modules in module_answers(needs).values() for module in modules}
    added = {m for modules in retrieval_sets.STDLIB_DOCS_ADDED.values() for m in modules}
    assert added and not added & used

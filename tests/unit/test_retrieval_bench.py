"""bench.retrieval's scoring: ranks are over distinct documents, from a window that holds K of them."""

from __future__ import annotations

from dataclasses import dataclass

from bench.retrieval import DEPTH, K, first_relevant_rank, query_ranks, ranked_documents


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

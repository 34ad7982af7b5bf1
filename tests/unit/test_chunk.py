import random

from workers.chunk import chunk_elements
from workers.parse import Element, split_lines


def _paragraphs(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    words = "sync chunk embed collection source folder vector sparse dense batch query index worker".split()
    return [" ".join(f"{rng.choice(words).capitalize()} {' '.join(rng.choices(words, k=rng.randint(6, 14)))}."
                     for _ in range(rng.randint(2, 5))) for _ in range(count)]


def _elements(paragraphs: list[str], titles_every: int = 0) -> list[Element]:
    elements = []
    for n, paragraph in enumerate(paragraphs):
        if titles_every and n % titles_every == 0:
            elements.append(Element(f"Section {n // titles_every}", "Title"))
        elements.append(Element(paragraph, "NarrativeText", page=1 + n // 10))
    return elements


def test_chunks_respect_size_plus_overlap():
    chunks = chunk_elements(_elements(_paragraphs(1, 80)), size=600, overlap=80, min_size=200)
    assert len(chunks) > 10
    assert all(len(c.text) <= 600 + 80 + 2 for c in chunks)
    assert [c.index for c in chunks] == list(range(len(chunks)))


def test_sections_start_new_chunks_and_are_recorded():
    chunks = chunk_elements(_elements(_paragraphs(2, 12), titles_every=3), size=2000, overlap=0, min_size=5000)
    assert [c.section for c in chunks] == [f"Section {i}" for i in range(4)]
    assert all(c.text.startswith(c.section) for c in chunks)


def test_pages_are_kept():
    chunks = chunk_elements(_elements(_paragraphs(3, 40)), size=500, overlap=0, min_size=100)
    assert chunks[0].page == 1
    assert chunks[-1].page_end == 4
    assert all(c.page <= c.page_end for c in chunks)


def test_editing_one_paragraph_changes_few_chunks():
    paragraphs = _paragraphs(4, 120)
    before = {c.text for c in chunk_elements(_elements(paragraphs), size=700, overlap=100, min_size=250)}
    edited = list(paragraphs)
    edited[40] = edited[40].replace(".", ", which the reviewers asked to clarify in more detail.", 1)
    after = {c.text for c in chunk_elements(_elements(edited), size=700, overlap=100, min_size=250)}
    changed = after - before
    assert 1 <= len(changed) <= 3, f"{len(changed)} of {len(after)} chunks changed"


def test_text_fast_path_keeps_line_numbers():
    source = "\n".join(f"def f{n}():\n    return {n}\n" for n in range(200))
    chunks = chunk_elements(split_lines(source), size=300, overlap=0, min_size=100)
    assert chunks[0].line_start == 1
    lines = source.splitlines()
    for chunk in chunks:
        assert chunk.text.split("\n") == lines[chunk.line_start - 1:chunk.line_end]


def test_overlap_repeats_the_tail_of_the_previous_chunk():
    lines = "\n".join(f"line number {n} of the notes" for n in range(100))
    chunks = chunk_elements(split_lines(lines), size=300, overlap=60, min_size=100)
    for previous, current in zip(chunks, chunks[1:]):
        assert current.line_start <= previous.line_end
        assert previous.text.splitlines()[-1] in current.text


def test_a_giant_line_is_split():
    chunks = chunk_elements(split_lines("x" * 5000), size=1000, overlap=0, min_size=0)
    assert len(chunks) == 5 and all(len(c.text) <= 1000 for c in chunks)

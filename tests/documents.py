"""Builders for test documents in binary formats (kept out of the repository as files)."""

from __future__ import annotations

from pathlib import Path


def write_pdf(path: Path, pages: list[list[str]]) -> Path:
    """A minimal valid PDF with one Helvetica text block per page."""
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
    path.write_bytes(bytes(out))
    return path


def write_docx(path: Path) -> Path:
    import docx

    document = docx.Document()
    document.add_heading("Deploying the worker fleet", 1)
    document.add_paragraph("Each pipeline stage runs on its own queue so that pools scale independently.")
    document.add_heading("Dense embedding pool", 2)
    document.add_paragraph("The dense embedder can move to GPU nodes without touching the other pools.")
    document.save(path)
    return path


def write_pptx(path: Path) -> Path:
    import pptx

    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = "Headwater roadmap"
    slide.placeholders[1].text = "Embedded sync first, then hybrid retrieval, then the worker fleet."
    deck.save(path)
    return path


def write_binary_formats(folder: Path) -> None:
    """Add a PDF, a Word file and a PowerPoint deck to a folder."""
    write_pdf(folder / "report.pdf", [["Sync throughput report", "Headwater indexed the folder in one pass."],
                                      ["Deletes", "Deleted files disappear from search results at once."]])
    write_docx(folder / "fleet.docx")
    write_pptx(folder / "roadmap.pptx")

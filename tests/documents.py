"""Builders for test documents in binary formats (kept out of the repository as files)."""

from __future__ import annotations

from pathlib import Path

from headwater.pipeline.parser_check import minimal_pdf


def write_pdf(path: Path, pages: list[list[str]]) -> Path:
    """A minimal valid PDF with one Helvetica text block per page."""
    path.write_bytes(minimal_pdf(pages))
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

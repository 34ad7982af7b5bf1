"""Files of the kinds real repositories and document folders hold, written at test time.

Nothing here is hand-made to suit the parser: GitHub's templates are HTML comment blocks (as
nearly every PR and issue template is), Markdown carries YAML front matter, HTML has broken nesting,
the e-mail is written by Python's email package with an attachment, the Office files by
python-docx and python-pptx (tests/documents.py; installed with unstructured), and the PDFs are the ones Debian
packages ship under /usr/share/doc, or, on a machine with none, one written by matplotlib's PDF
backend (a real PDF writer with a text layer).
"""

from __future__ import annotations

import shutil
from email.message import EmailMessage
from pathlib import Path

from tests.documents import write_docx, write_pptx

# GitHub's pull request template as projects write it: three comment blocks and nothing else.
PR_TEMPLATE = """<!--
Thank you for sending a pull request! Please describe the change and link the issue it fixes.
-->

<!--
Checklist: tests added for the change, documentation updated, changelog entry written.
-->

<!--
Reviewers look for the quarterly rotation of the signing keys in every security change.
-->
"""
PR_TEMPLATE_PHRASE = "quarterly rotation of the signing keys"

ISSUE_TEMPLATE = """---
name: Bug report
about: Create a report to help us improve
title: ''
labels: bug
assignees: ''
---

<!-- Describe the bug and the steps that reproduce it. -->

**Describe the bug**
A clear and concise description of what the bug is.
"""

FRONT_MATTER = """---
title: Backups
layout: page
tags: [operations, restore]
---

# Backups

Restore the vector store from the nightly snapshot kept in the archive bucket.
"""

BROKEN_HTML = """<html><head><title>Release notes</title><body>
<div><p>Release 2.3 <b>adds <i>streaming</b> exports</i>
<table><tr><td>cell one<td>cell two</tr><p>Stray paragraph inside the table
<ul><li>first item<li>second item</div></ul>
<p>Unclosed paragraph about the lighthouse keeper's logbook
"""
# In the part of BROKEN_HTML that unstructured's HTML partitioner drops.
BROKEN_HTML_LAST_PHRASE = "lighthouse keeper's logbook"


def write_eml(path: Path) -> Path:
    """An e-mail with a text body and a CSV attachment, as Python's email package writes it."""
    message = EmailMessage()
    message["From"] = "Operations <ops@example.com>"
    message["To"] = "team@example.com"
    message["Subject"] = "Quarterly capacity report"
    message.set_content("Hello team,\n\nThe capacity report for the quarter is attached. Disk use grew 12 percent.\n")
    message.add_attachment("host,disk_gb\nalpha,120\nbeta,98\n".encode(), maintype="text", subtype="csv",
                           filename="capacity.csv")
    path.write_bytes(bytes(message))
    return path


def debian_pdfs(limit: int = 2, max_bytes: int = 2_000_000) -> list[Path]:
    """The smallest PDFs Debian packages installed under /usr/share/doc (none on a minimal machine)."""
    found = [p for p in Path("/usr/share/doc").rglob("*.pdf") if p.is_file() and p.stat().st_size <= max_bytes]
    return sorted(found, key=lambda p: p.stat().st_size)[:limit]


def write_matplotlib_pdf(path: Path) -> Path:
    """A one-page PDF with a text layer, written by matplotlib's PDF backend."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backends.backend_pdf import PdfPages
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8.27, 11.69))
    figure.text(0.1, 0.9, "Maintenance handbook", fontsize=20)
    figure.text(0.1, 0.85, "Drain the cooling loop before replacing the pump seal.", fontsize=12)
    with PdfPages(path) as pdf:
        pdf.savefig(figure)
    return path


def build_corpus(root: Path) -> dict[str, str]:
    """Write the corpus under `root`; returns relative path -> what it is (for messages)."""
    files: dict[str, str] = {}

    def put(relative: str, text: str | bytes, what: str) -> None:
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        (target.write_bytes if isinstance(text, bytes) else target.write_text)(text)
        files[relative] = what

    put(".github/pull_request_template.md", PR_TEMPLATE, "GitHub PR template of HTML comments")
    put(".github/ISSUE_TEMPLATE/bug_report.md", ISSUE_TEMPLATE, "GitHub issue template with front matter")
    put("docs/backups.md", FRONT_MATTER, "Markdown with YAML front matter")
    put("site/release-notes.html", BROKEN_HTML, "HTML with broken nesting")
    for relative, write, what in (("mail/capacity.eml", write_eml, "e-mail with an attachment"),
                                  ("office/review.docx", write_docx, "docx by python-docx"),
                                  ("office/roadmap.pptx", write_pptx, "pptx by python-pptx")):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        write(root / relative)
        files[relative] = what
    (root / "pdf").mkdir(parents=True, exist_ok=True)
    pdfs = debian_pdfs()
    for n, pdf in enumerate(pdfs):
        shutil.copyfile(pdf, root / f"pdf/debian-{n}.pdf")
        files[f"pdf/debian-{n}.pdf"] = f"PDF from {pdf}"
    if not pdfs:  # a clean machine has no PDFs under /usr/share/doc: a real writer makes one
        write_matplotlib_pdf(root / "pdf/handbook.pdf")
        files["pdf/handbook.pdf"] = "PDF by matplotlib"
    return files

"""Print how a folder's documents would be chunked, to pick HEADWATER_CHUNK_SIZE."""

import sys
from pathlib import Path


def average_paragraph_length(folder: Path) -> float:
    """Mean length in characters of blank-line separated paragraphs in Markdown files."""
    lengths = []
    for path in folder.rglob("*.md"):
        for paragraph in path.read_text(encoding="utf-8").split("\n\n"):
            if paragraph.strip():
                lengths.append(len(paragraph))
    return sum(lengths) / len(lengths) if lengths else 0.0


if __name__ == "__main__":
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    print(f"average paragraph: {average_paragraph_length(folder):.0f} characters")

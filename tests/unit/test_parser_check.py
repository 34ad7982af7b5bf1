"""`headwater doctor`'s parser check: every format and grammar Headwater reads, and a broken one named."""

from __future__ import annotations

import subprocess
import sys

import pytest

from headwater.pipeline import code_chunks
from headwater.pipeline.parse import UNSTRUCTURED_TYPES
from headwater.pipeline.parser_check import SAMPLES, check_parsers


def test_the_samples_cover_every_format_and_the_names_every_grammar():
    sampled = {uri[uri.rfind("."):] for uri, mime, _ in SAMPLES.values() if mime is None}
    assert {UNSTRUCTURED_TYPES[s] for s in sampled} == set(UNSTRUCTURED_TYPES.values())
    assert any(mime == "text/html" for _, mime, _ in SAMPLES.values())  # a crawled page takes another path
    named = {code_chunks._GRAMMARS[suffix] for suffix in code_chunks.GRAMMAR_NAMES.values()}
    assert named == set(code_chunks._GRAMMARS.values())


@pytest.mark.timeout(120)
def test_every_sample_parses_with_its_own_parser():
    formats, grammars = check_parsers()
    assert formats == list(SAMPLES) and grammars == list(code_chunks.GRAMMAR_NAMES)


@pytest.mark.timeout(120)
def test_a_format_whose_parser_cannot_import_is_named_with_what_to_do():
    """pdfminer made unimportable, as a broken or partial install leaves it: the PDF check fails, saying so."""
    script = ("import sys; sys.modules['pdfminer'] = None\n"
              "from headwater.errors import ConfigurationError\n"
              "from headwater.pipeline.parser_check import check_parsers\n"
              "try:\n    check_parsers()\nexcept ConfigurationError as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("a sample PDF document could not be parsed") and "pdfminer" in done.stdout
    assert done.stdout.count("run scripts/install.sh") == 1, done.stdout

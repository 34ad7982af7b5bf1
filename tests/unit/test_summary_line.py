"""The document summary every chunk header ends with: which sentence is picked, and where it goes."""

from headwater.settings import Settings
from tests.unit.test_chunk import _lines, assert_within_window
from headwater.pipeline.chunk import HEADER_SEPARATOR, SUMMARY_TOKENS, chunk_document
from headwater.pipeline.parse import Element
from headwater.pipeline.summary_line import code_summary, prose_summary
from headwater.pipeline.tokens import token_counter


def test_prose_summary_is_the_lead_paragraphs_first_sentence():
    elements = [Element("json", "Title"), Element("JSON encoder and decoder. It follows RFC 8259.", "NarrativeText"),
                Element("loads", "Title"), Element("Deserialize a string.", "NarrativeText")]
    assert prose_summary(elements) == "JSON encoder and decoder."
    assert prose_summary(elements[1:]) == "JSON encoder and decoder."  # a document without a title


def test_a_document_whose_first_section_starts_at_once_has_no_summary():
    # The first section's text describes that section, not the document.
    elements = [Element("json", "Title"), Element("loads", "Title"), Element("Deserialize a string.", "NarrativeText")]
    assert prose_summary(elements) is None


def test_code_summary_reads_the_module_docstring_past_a_shebang_and_a_license():
    source = ['#!/usr/bin/env python', '# -*- coding: utf-8 -*-', '# Copyright 2024 Example Ltd.',
              '# Licensed under the Apache License, Version 2.0.', '',
              '"""Parse command-line options into typed values.', '', 'Longer text.', '"""', 'import os']
    assert code_summary(source) == "Parse command-line options into typed values."
    assert code_summary(["'''One line docstring.'''", "x = 1"]) == "One line docstring."


def test_code_summary_reads_leading_comments_in_other_languages():
    assert code_summary(["// Package mux implements a request router. It matches paths.", "package mux"]) == \
        "Package mux implements a request router."
    assert code_summary(["//! Streaming JSON parser.", "", "use std::io;"]) == "Streaming JSON parser."
    assert code_summary(["/**", " * Maps URL paths to handlers.", " */", "export class Router {}"]) == \
        "Maps URL paths to handlers."


def test_code_without_a_leading_docstring_or_comment_has_no_summary():
    assert code_summary(["import os", '"""Not the module docstring: code came first."""']) is None
    assert code_summary(["// SPDX-License-Identifier: MIT", "", "package main"]) is None
    assert code_summary(["#include <stdio.h>", "// main"]) is None
    assert code_summary([]) is None


def test_every_code_chunk_header_ends_with_the_files_summary_after_its_symbols():
    functions = "\n\n".join(f"def step_{n}(value):\n" + "".join(f"    value = value * {k} + {n}  # scale\n"
                                                           for k in range(12)) + "    return value\n"
                            for n in range(12))
    source = f'"""Numeric pipelines for the nightly batch."""\n\n{functions}'
    chunks = chunk_document(_lines(source), "jobs/pipeline.py", Settings())
    assert len(chunks) > 2
    for chunk in chunks:
        header = chunk.text.split(HEADER_SEPARATOR, 1)[0]
        expected = f"jobs/pipeline.py > {chunk.symbol} > " if chunk.symbol else "jobs/pipeline.py > "
        assert header == expected + "Numeric pipelines for the nightly batch.", header


def test_a_long_summary_is_cut_and_never_displaces_the_path_or_symbols():
    settings = Settings()
    summary = "Helpers " + " ".join(f"for case number {n}" for n in range(60)) + "."
    source = f'"""{summary}"""\n\n' + "\n\n".join(f"def handler_{n}(event):\n" + "    event.check()\n" * 30
                                                     for n in range(4))
    chunks = chunk_document(_lines(source), "a/deeply/nested/package/with/a/long/path/to/handlers.py", settings)
    counter = token_counter()
    assert sum(1 for c in chunks if c.symbol) >= 2
    for chunk in chunks:
        header = chunk.text.split(HEADER_SEPARATOR, 1)[0]
        place = "a/deeply/nested/package/with/a/long/path/to/handlers.py" + (f" > {chunk.symbol}" if chunk.symbol else "")
        assert header.startswith(f"{place} > Helpers"), header
        assert counter.count(header.rsplit(" > ", 1)[1]) <= SUMMARY_TOKENS
    assert_within_window(chunks, settings)


def test_editing_the_summary_sentence_rechunks_the_whole_document_but_editing_elsewhere_does_not():
    # The summary is in every header: changing it re-embeds every chunk of the file (docs/architecture.md says so).
    body = "\n\n".join(f"def f{n}(x):\n" + "    x += 1\n" * 20 + "    return x\n" for n in range(6))
    before = {c.text for c in chunk_document(_lines(f'"""Counters."""\n\n{body}'), "c.py", Settings())}
    renamed = {c.text for c in chunk_document(_lines(f'"""Tally counters."""\n\n{body}'), "c.py", Settings())}
    assert not before & renamed
    edited = body.replace("def f3(x):\n    x += 1", "def f3(x):\n    x += 2", 1)
    after = {c.text for c in chunk_document(_lines(f'"""Counters."""\n\n{edited}'), "c.py", Settings())}
    assert len(after - before) == 1

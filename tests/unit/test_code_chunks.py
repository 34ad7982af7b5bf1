"""The chunker on source code: chunks follow the syntax, carry symbol paths and line ranges, and stay put under edits."""

import pytest

from headwater.settings import Settings
from tests.unit.test_chunk import _body, _lines, assert_within_window
from headwater.pipeline.chunk import HEADER_SEPARATOR, chunk_document


def _filler(n: int, comment: str = "#") -> str:
    """Lines that make a body large enough to stand alone."""
    return "\n".join(f"        {comment} step {k}: validate the request headers and retry on failure" for k in range(n))


PYTHON = f'''import os


class Session:
    """Keeps connection pools and cookies across requests."""

    def request(self, method, url):
{_filler(9)}
        return self.send(method, url)

    @property
    def closed(self):
{_filler(9)}
        return False


def helper(x):
{_filler(9).replace("        ", "    ")}
    return x
'''

JAVASCRIPT = f'''import fs from "fs";

export class Session {{
  request(method, url) {{
{_filler(9, "//")}
    return this.send(method, url);
  }}

  close() {{
{_filler(9, "//")}
  }}
}}

export const helper = (x) => {{
{_filler(9, "//")}
  return x;
}};
'''

TYPESCRIPT = f'''export interface Options {{
  retries: number;
}}

export class Session {{
  request(method: string, url: string): Promise<Response> {{
{_filler(9, "//")}
    return this.send(method, url);
  }}

  close(): void {{
{_filler(9, "//")}
  }}
}}

export function helper(x: number): number {{
{_filler(9, "//")}
  return x;
}}
'''

GO = f'''package http

type Session struct {{
	pool int
}}

func (s *Session) Request(method string, url string) error {{
{_filler(9, "//")}
	return nil
}}

func (s Session) Close() {{
{_filler(9, "//")}
}}

func Helper(x int) int {{
{_filler(9, "//")}
	return x
}}
'''

RUST = f'''pub struct Session {{
    pool: usize,
}}

impl<T> Session<T> {{
    pub fn request(&self, method: &str, url: &str) -> Result<(), Error> {{
{_filler(9, "//")}
        Ok(())
    }}

    pub fn close(&mut self) {{
{_filler(9, "//")}
    }}
}}

pub fn helper(x: i32) -> i32 {{
{_filler(9, "//")}
    x
}}
'''

JAVA = f'''package http;

public class Session {{
    private int pool;

    public Session(int pool) {{
{_filler(9, "//")}
        this.pool = pool;
    }}

    public Response request(String method, String url) {{
{_filler(9, "//")}
        return send(method, url);
    }}

    static class Pool {{
        void close() {{
{_filler(9, "//")}
        }}

        void drain() {{
{_filler(9, "//")}
        }}
    }}
}}
'''

CASES = {
    "py": (PYTHON, {"Session.request", "Session.closed", "helper"}),
    "js": (JAVASCRIPT, {"Session.request", "Session.close", "helper"}),
    "ts": (TYPESCRIPT, {"Session.request", "Session.close", "helper"}),
    "go": (GO, {"Session.Request", "Session.Close", "Helper"}),
    "rs": (RUST, {"Session.request", "Session.close", "helper"}),
    "java": (JAVA, {"Session.Session", "Session.request", "Session.Pool.close", "Session.Pool.drain"}),
}
# Each class is too large for one chunk, so it splits into its methods, and each method stands alone.
SETTINGS = Settings(chunk_tokens=256, chunk_min_tokens=100)


def _chunks(language: str, source: str, settings: Settings = SETTINGS):
    return chunk_document(_lines(source), f"src/http/session.{language}", settings)


@pytest.mark.parametrize("language", sorted(CASES))
def test_each_function_or_method_is_a_chunk_with_its_symbol_path(language):
    source, expected = CASES[language]
    chunks = _chunks(language, source)
    symbols = {c.symbol for c in chunks}
    assert expected <= symbols, symbols
    lines = source.splitlines()
    for chunk in chunks:
        header, body = chunk.text.split(HEADER_SEPARATOR, 1)
        assert header == f"src/http/session.{language}" + (f" > {chunk.symbol}" if chunk.symbol else "")
        assert body.split("\n") == lines[chunk.line_start - 1:chunk.line_end]  # the exact source lines
    assert_within_window(chunks, SETTINGS)
    covered = sorted(n for c in chunks for n in range(c.line_start, c.line_end + 1))
    assert covered == sorted(set(covered))  # no line in two chunks


@pytest.mark.parametrize("language", sorted(CASES))
def test_an_edit_inside_one_function_changes_only_its_chunk(language):
    source, _ = CASES[language]
    before = {c.text: c.symbol for c in _chunks(language, source)}
    edited = source.replace("step 3: validate", "step 3: double-check and validate", 1)
    after = {c.text: c.symbol for c in _chunks(language, edited)}
    changed = [symbol for text, symbol in after.items() if text not in before]
    assert len(changed) == 1 and len(before) == len(after), changed


def test_small_neighbours_are_merged_and_a_file_that_fits_is_one_chunk():
    small = "\n\n".join(f"def f{n}(x):\n    return x + {n}\n" for n in range(40))
    chunks = _chunks("py", small, Settings())
    assert 1 < len(chunks) < 20
    assert all("," in c.symbol for c in chunks if c.symbol)  # several symbols per chunk
    assert len(_chunks("py", "def f(x):\n    return x\n", Settings())) == 1


def _ledger() -> str:
    """A class whose one method is far larger than a chunk, ending in a one-line `return`."""
    body = "".join(f"        if value == {n}:\n            total += compute_the_running_total(value, {n})\n"
                   for n in range(120))
    return f"class Ledger:\n    def add(self, value):\n        total = 0\n{body}        return total\n"


def test_a_large_function_is_split_at_inner_boundaries_and_keeps_its_symbol():
    settings = Settings()
    chunks = _chunks("py", _ledger(), settings)
    assert len(chunks) > 3 and {c.symbol for c in chunks} == {"Ledger.add"}
    assert_within_window(chunks, settings)
    assert all(_body(c.text).strip().startswith(("class Ledger:", "if value")) for c in chunks)


def test_a_files_short_last_remainder_joins_the_chunk_before_it_instead_of_standing_alone():
    source = _ledger()
    settings = Settings()
    chunks = _chunks("py", source, settings)
    assert chunks[-1].line_end == len(source.splitlines()) and _body(chunks[-1].text).strip() != "return total"
    assert _body(chunks[-1].text).rstrip().endswith("return total")
    assert_within_window(chunks, settings)


def test_unparseable_code_still_chunks():
    chunks = _chunks("py", "def broken(:\n    return ]\n" * 50, Settings())
    assert chunks and all(c.text.startswith("src/http/session.py") for c in chunks)

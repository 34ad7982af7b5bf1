"""Source code split along its syntax: one piece per function, method or class where it fits the window.

tree-sitter parses the file; every definition (function, method, class, impl, interface, ...)
is a piece with its symbol path (`Session.request`). A definition too large for the window is
split at its inner boundaries (methods, then statements, then lines), each part keeping the
definition's symbol path. The lines before a definition (comments, decorators, blank lines)
belong to it, so pieces cover every line of the file exactly once.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Any

from headwater.errors import PermanentDocumentError

# Extension -> (grammar module, its language function).
_GRAMMARS = {
    ".py": ("tree_sitter_python", "language"), ".pyi": ("tree_sitter_python", "language"),
    ".js": ("tree_sitter_javascript", "language"), ".mjs": ("tree_sitter_javascript", "language"),
    ".cjs": ("tree_sitter_javascript", "language"), ".jsx": ("tree_sitter_javascript", "language"),
    ".ts": ("tree_sitter_typescript", "language_typescript"), ".mts": ("tree_sitter_typescript", "language_typescript"),
    ".cts": ("tree_sitter_typescript", "language_typescript"), ".tsx": ("tree_sitter_typescript", "language_tsx"),
    ".go": ("tree_sitter_go", "language"), ".rs": ("tree_sitter_rust", "language"),
    ".java": ("tree_sitter_java", "language"),
}
# The file endings chunked along their syntax: what other stages (consolidation) treat as code.
CODE_SUFFIXES = frozenset(_GRAMMARS)
# Each grammar above by the name users know, with one of its endings (what `headwater doctor` loads).
GRAMMAR_NAMES = {"Python": ".py", "JavaScript": ".js", "TypeScript": ".ts", "TSX": ".tsx", "Go": ".go",
                 "Rust": ".rs", "Java": ".java"}

# Node types that define a named symbol, in any of the grammars above.
_DEFINITIONS = {
    # Python
    "function_definition", "class_definition",
    # JavaScript / TypeScript
    "function_declaration", "generator_function_declaration", "class_declaration", "abstract_class_declaration",
    "method_definition", "interface_declaration", "enum_declaration", "internal_module", "module",
    # Go (function_declaration above), methods and types
    "method_declaration", "type_spec",
    # Rust
    "function_item", "struct_item", "enum_item", "trait_item", "impl_item", "mod_item", "union_item",
    # Java (class/interface/enum/method above)
    "record_declaration", "constructor_declaration", "annotation_type_declaration",
}
# Wrappers whose inner node is the definition (decorators, `export`).
_WRAPPERS = {"decorated_definition": "definition", "export_statement": "declaration"}
# `const f = () => {...}` and friends: a variable whose value is a function or class is that symbol.
_VARIABLES = {"lexical_declaration", "variable_declaration"}
_FUNCTION_VALUES = {"arrow_function", "function_expression", "function", "generator_function", "class"}
_GENERIC_ARGS = re.compile(r"<.*>$", re.S)


@lru_cache(maxsize=None)
def _parser(suffix: str) -> Any:
    import importlib

    module, function = _GRAMMARS[suffix]
    try:
        from tree_sitter import Language, Parser

        return Parser(Language(getattr(importlib.import_module(module), function)()))
    except (ImportError, ValueError) as exc:  # missing wheel, or a grammar built for another runtime
        raise PermanentDocumentError(
            f"{suffix} files are chunked with tree-sitter, but its grammar {module} could not be loaded "
            f"({exc}); run scripts/install.sh to install the versions pyproject.toml pins") from None


@lru_cache(maxsize=None)
def grammar_problem(suffix: str) -> str | None:
    """Why the grammar of `suffix` cannot be loaded (its files are then chunked as plain text), or None."""
    try:
        _parser(suffix)
    except PermanentDocumentError as exc:
        return str(exc)
    return None


def code_language(uri: str) -> str | None:
    """The grammar's extension key when `uri` is source code Headwater parses by syntax, else None."""
    suffix = PurePosixPath(uri).suffix.lower()
    return suffix if suffix in _GRAMMARS else None


@dataclass(frozen=True)
class Piece:
    """Lines `start`..`end` (0-based, inclusive) of a file, the symbol paths they hold, and their size."""

    start: int
    end: int
    symbols: tuple[str, ...]
    tokens: int
    whole: bool  # one complete definition


def syntax_pieces(source: bytes, suffix: str, line_tokens: list[int], budget: int) -> list[Piece]:
    """Pieces of at most `budget` tokens (a single over-long line excepted) covering every line of `source`."""
    tree = _parser(suffix).parse(source)
    prefix = [0]
    for count in line_tokens:
        prefix.append(prefix[-1] + count)
    last = len(line_tokens) - 1
    if last < 0:
        return []
    splitter = _Splitter(source, lambda lo, hi: prefix[hi + 1] - prefix[lo], budget)
    return splitter.split(tree.root_node, 0, last, "", whole=False)


class _Splitter:
    def __init__(self, source: bytes, size: Callable[[int, int], int], budget: int) -> None:
        self.source = source
        self.size = size
        self.budget = budget

    def split(self, node: Any, lo: int, hi: int, path: str, whole: bool) -> list[Piece]:
        tokens = self.size(lo, hi)
        symbols = (path,) if path else ()
        if tokens <= self.budget or lo == hi:
            if not whole:  # a stretch of a file or body that fits: it names the definitions it holds
                symbols += self._definitions_under(node, path)
            return [Piece(lo, hi, symbols, tokens, whole)]
        pieces: list[Piece] = []
        cursor = lo
        for child in self._children(node):
            end = min(child.end_point.row, hi)
            if end < cursor:
                continue  # shares a line already covered
            definition = _definition(child, self.source)
            if definition:
                name, inner = definition
                pieces += self.split(inner, cursor, end, f"{path}.{name}" if path else name, whole=True)
            else:
                pieces += self.split(child, cursor, end, path, whole=False)
            cursor = end + 1
        if cursor == lo and not pieces:  # no inner structure spans these lines: cut between lines
            return [Piece(n, n, symbols, self.size(n, n), False) for n in range(lo, hi + 1)]
        if cursor <= hi:  # closing lines after the last child (a brace, a trailing comment)
            pieces.append(Piece(cursor, hi, symbols, self.size(cursor, hi), False))
        return pieces

    def _definitions_under(self, node: Any, path: str) -> tuple[str, ...]:
        """Symbol paths of the definitions directly under `node`."""
        found = (_definition(child, self.source) for child in node.named_children)
        return tuple(f"{path}.{d[0]}" if path else d[0] for d in found if d)

    @staticmethod
    def _children(node: Any) -> list[Any]:
        body = node.child_by_field_name("body")
        container = body if body is not None and body.named_child_count else node
        children = list(container.named_children)
        if container is not node:
            # The lines from the definition's start to its body (signature, docstring) come first.
            children = [c for c in node.named_children if c.end_byte <= container.start_byte] + children
        return children


def _definition(node: Any, source: bytes) -> tuple[str, Any] | None:
    """(name, node whose body holds the inner definitions) when `node` defines a symbol."""
    kind = node.type
    if kind in _WRAPPERS:
        inner = node.child_by_field_name(_WRAPPERS[kind])
        return _definition(inner, source) if inner is not None else None
    if kind in _VARIABLES:
        declarators = [c for c in node.named_children if c.type == "variable_declarator"]
        if len(declarators) == 1:
            value = declarators[0].child_by_field_name("value")
            name = declarators[0].child_by_field_name("name")
            if value is not None and name is not None and value.type in _FUNCTION_VALUES:
                return _text(name, source), value
        return None
    if kind not in _DEFINITIONS:
        return None
    if kind == "impl_item":  # `impl Trait for Type`: methods live under the type's name
        target = node.child_by_field_name("type")
        return (_GENERIC_ARGS.sub("", _text(target, source)), node) if target is not None else None
    name = node.child_by_field_name("name")
    if name is None:
        return None
    if kind == "method_declaration" and node.child_by_field_name("receiver") is not None:  # Go: (s *Server) Run
        receiver = _receiver_type(node.child_by_field_name("receiver"), source)
        if receiver:
            return f"{receiver}.{_text(name, source)}", node
    if kind == "type_spec":  # Go: the struct or interface body holds the fields
        return _text(name, source), node.child_by_field_name("type") or node
    return _text(name, source), node


def _receiver_type(receiver: Any, source: bytes) -> str | None:
    for parameter in receiver.named_children:
        kind = parameter.child_by_field_name("type")
        while kind is not None and kind.type in ("pointer_type", "generic_type"):
            kind = kind.child_by_field_name("type") or (kind.named_children[0] if kind.named_children else None)
        if kind is not None:
            return _GENERIC_ARGS.sub("", _text(kind, source))
    return None


def _text(node: Any, source: bytes) -> str:
    return source[node.start_byte:node.end_byte].decode("utf-8", errors="replace")

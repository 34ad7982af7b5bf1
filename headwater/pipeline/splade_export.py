"""The one-time export of a SPLADE checkpoint to ONNX, made by `headwater doctor` at install time.

A BERT masked LM with safetensors weights (SPLADE-tiny, and most SPLADE checkpoints) is written
as an ONNX graph from its tensors by headwater.pipeline.splade_graph, with no torch; any other checkpoint
(another architecture, or weights only in pytorch_model.bin) is traced by torch, which the
`torch-export` extra installs. Either way, encoding then runs on onnxruntime alone. The exported
graph maps one text's token ids to its SPLADE weights, log(1 + ReLU(max over tokens of the MLM
logits)), with no padding and no attention mask: every text runs alone, so its vector depends
only on its text.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path

from headwater.errors import ConfigurationError
from headwater.pipeline.splade_graph import OPSET, build_splade_graph, supports

MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"


def export_splade(checkpoint: Path, target: Path) -> Path:
    """Write model.onnx and tokenizer.json for `checkpoint` into `target` (atomically, as a directory)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    staging.chmod(0o755)  # mkdtemp's 0700 would hide the export from other users of the environment
    try:
        if supports(checkpoint):
            build_splade_graph(checkpoint, staging / MODEL_FILE)
            save_tokenizer(checkpoint, staging / TOKENIZER_FILE)
        else:
            _torch_export(checkpoint, staging)
        os.replace(staging, target)  # another process may have finished first: its copy is as good
    except OSError:
        if not (target / MODEL_FILE).is_file():
            raise
    finally:
        if staging.exists():
            for path in staging.iterdir():
                path.unlink()
            staging.rmdir()
    return target


def save_tokenizer(checkpoint: Path, target: Path) -> None:
    """The checkpoint's fast-tokenizer file, or one made from its vocab.txt (BERT's WordPiece), for the tokenizers library."""
    from tokenizers import Tokenizer

    if (checkpoint / TOKENIZER_FILE).is_file():
        Tokenizer.from_file(str(checkpoint / TOKENIZER_FILE)).save(str(target))
        return
    if not (checkpoint / "vocab.txt").is_file():
        raise ConfigurationError(f"SPLADE model directory {checkpoint} has neither tokenizer.json nor vocab.txt; "
                                 "save the checkpoint's tokenizer with it")
    from tokenizers.implementations import BertWordPieceTokenizer

    options = {}
    if (checkpoint / "tokenizer_config.json").is_file():
        options = json.loads((checkpoint / "tokenizer_config.json").read_text())
    BertWordPieceTokenizer(str(checkpoint / "vocab.txt"), lowercase=options.get("do_lower_case", True),
                           strip_accents=options.get("strip_accents"),
                           handle_chinese_chars=options.get("tokenize_chinese_chars", True)).save(str(target))


def _torch_export(checkpoint: Path, staging: Path) -> None:
    """Trace the checkpoint with torch: for checkpoints headwater.pipeline.splade_graph does not build."""
    try:
        import torch
        from transformers import AutoModelForMaskedLM, AutoTokenizer
        from transformers.utils import logging as transformers_logging
    except ImportError as exc:
        raise ConfigurationError(
            f"the SPLADE checkpoint {checkpoint} is not a BERT masked LM with model.safetensors, so exporting it "
            f"to ONNX needs torch and transformers ({exc.name} is missing): install the torch-export extra "
            "(pip install -e '.[torch-export]'), or copy an export made elsewhere into "
            "HEADWATER_ONNX_CACHE_DIR") from exc

    transformers_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(checkpoint, local_files_only=True)
    model = AutoModelForMaskedLM.from_pretrained(checkpoint, local_files_only=True).eval()
    example = torch.tensor([tokenizer("headwater exports SPLADE once")["input_ids"]])
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on shapes it treats as constants: expected here
        torch.onnx.export(_weights_module(model), (example,), str(staging / MODEL_FILE), input_names=["input_ids"],
                          output_names=["weights"], opset_version=OPSET, dynamo=False,
                          dynamic_axes={"input_ids": {0: "batch", 1: "length"}, "weights": {0: "batch"}})
    # The fast tokenizer's own file, so encoding needs only the tokenizers library (any checkpoint,
    # even one that ships just vocab.txt); truncation is set by the encoder, padding never used.
    tokenizer.backend_tokenizer.save(str(staging / TOKENIZER_FILE))


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

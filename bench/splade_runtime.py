"""SPLADE per-text encoding cost on one thread: torch (the encoder Headwater used before) against onnxruntime.

Texts: consecutive pieces of the standard library's argparse.py (its docstrings, comments and code:
a fixed text, whatever this repository holds) of about 250 word pieces. Each encoder runs on one
thread, one text at a time, in interleaved rounds (so a shared machine's load falls on all alike);
the figure is the thread's CPU time per text, which load disturbs far less than wall time.

* torch: the checkpoint through transformers, with the vocabulary projection per text in
  4,096-column tiles (the fastest torch path measured before; its code is kept here).
* onnxruntime fp32: Headwater's encoder (headwater.pipeline.embed_sparse) on the exported graph.
* onnxruntime int8 projection: the same graph with the vocabulary projection quantised
  (dynamic int8, per text), to show what quantising would buy and what it would change.

Run: ``python -m bench.splade_runtime``.
"""

from __future__ import annotations

import os
import statistics
import sysconfig
import tempfile
from pathlib import Path
from time import thread_time

import numpy as np

from headwater.pipeline.embed_sparse import SpladeEncoder, packaged_splade_dir

ROUNDS = 4
TEXTS = 24
VOCAB_TILE = 4096


def torch_encoder(checkpoint: Path):
    """The torch path Headwater ran before onnxruntime: encoder, then a tiled per-text projection."""
    import torch
    from transformers import AutoModelForMaskedLM
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    torch.set_num_threads(1)
    model = AutoModelForMaskedLM.from_pretrained(checkpoint, local_files_only=True).eval()
    weight, bias = model.cls.predictions.decoder.weight, model.cls.predictions.decoder.bias

    def encode(ids: list[int]) -> np.ndarray:
        with torch.inference_mode():
            tokens = torch.tensor([ids])
            hidden = model.cls.predictions.transform(
                model.bert(input_ids=tokens, attention_mask=torch.ones_like(tokens)).last_hidden_state)[0].t()
            scores = torch.empty(weight.shape[0])
            for lo in range(0, weight.shape[0], VOCAB_TILE):
                hi = lo + VOCAB_TILE
                scores[lo:hi] = torch.addmm(bias[lo:hi, None], weight[lo:hi], hidden).max(dim=1).values
            return torch.log1p(torch.relu(scores)).numpy()

    return encode


def onnx_encoder(model_file: Path):
    from headwater.pipeline.onnx_session import cpu_session

    session = cpu_session(model_file, threads=1)
    return lambda ids: session.run(None, {"input_ids": np.array([ids], dtype=np.int64)})[0][0]


def int8_projection(model_file: Path, target: Path) -> Path:
    """The export with its last MatMul (the vocabulary projection) quantised to int8, dynamically."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    projection = [node.name for node in onnx.load(str(model_file)).graph.node if node.op_type == "MatMul"][-1]
    quantize_dynamic(str(model_file), str(target), nodes_to_quantize=[projection], weight_type=QuantType.QInt8)
    return target


def sparse(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    nonzero = np.flatnonzero(weights)
    return nonzero, weights[nonzero]


def cosine(weights: np.ndarray, reference: np.ndarray) -> float:
    return float(weights @ reference / (np.linalg.norm(weights) * np.linalg.norm(reference)))


def main() -> None:
    print(f"{os.cpu_count()} CPUs, load average at start {os.getloadavg()}")
    encoder = SpladeEncoder(threads=1)
    words = (Path(sysconfig.get_paths()["stdlib"]) / "argparse.py").read_text().split()
    texts = [" ".join(words[i:i + 170]) for i in range(0, 170 * TEXTS, 170)]
    ids = encoder.token_ids(texts)
    print(f"{len(texts)} texts, {statistics.mean(len(i) for i in ids):.0f} word pieces on average")
    with tempfile.TemporaryDirectory() as scratch:
        runtimes = {"torch (before)": torch_encoder(packaged_splade_dir()),
                    "onnxruntime fp32 (now)": onnx_encoder(encoder.onnx_file),
                    "onnxruntime, int8 projection": onnx_encoder(int8_projection(encoder.onnx_file,
                                                                                  Path(scratch) / "int8.onnx"))}
        cpu: dict[str, list[float]] = {name: [] for name in runtimes}
        for _ in range(ROUNDS):
            for name, encode in runtimes.items():
                for text_ids in ids:
                    started = thread_time()
                    encode(text_ids)
                    cpu[name].append(thread_time() - started)
        dense_reference = [runtimes["torch (before)"](i) for i in ids]
        reference = [sparse(weights) for weights in dense_reference]
        print(f"torch's vectors have {statistics.mean(len(r[0]) for r in reference):.0f} active terms on average")
        print("\nagainst torch: texts with the same active terms, terms that differ per text (mean), largest value\n"
              "difference where the terms agree, float16 values that differ there, mean cosine")
        for name, encode in runtimes.items():
            weights = [encode(i) for i in ids]
            vectors = [sparse(w) for w in weights]
            agree = [(a, b) for a, b in zip(vectors, reference) if np.array_equal(a[0], b[0])]
            differing = statistics.mean(len(np.setxor1d(a[0], b[0])) for a, b in zip(vectors, reference))
            largest = max((float(np.abs(a[1] - b[1]).max()) for a, b in agree), default=float("nan"))
            f16 = statistics.mean(float(np.mean(a[1].astype(np.float16) != b[1].astype(np.float16)))
                                  for a, b in agree) if agree else float("nan")
            cos = statistics.mean(cosine(w, r) for w, r in zip(weights, dense_reference))
            print(f"{name:<30} CPU {1000 * statistics.median(cpu[name][len(ids):]):5.1f} ms/text p50 | same terms "
                  f"{len(agree)}/{len(ids)}, {differing:.1f} differ | max diff {largest:.1e} | float16 {100 * f16:.2f} % "
                  f"| cosine {cos:.6f}")
    print(f"load average at end {os.getloadavg()}")


if __name__ == "__main__":
    main()

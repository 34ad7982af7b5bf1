"""Whether this CPU's int8 products saturate, and what the dense model's int8 builds compute here.

onnxruntime multiplies uint8 activations by int8 weights with 16-bit pair sums on CPUs without
VNNI, which saturate; the build Headwater runs stores the weights as uint8 there
(headwater/pipeline/dense_int8.py). For pieces of the standard library's `email` package this prints, for
the signed build (int8 weights) and the unsigned one (the same weights plus 128), the cosine of
their vectors to the float32 model's and to each other's, and the CPU time per text, measured in
interleaved rounds in one process. On a CPU whose signed products are exact both builds compute
the same vectors; where they saturate, only the unsigned build computes those.

Run: ``python -m bench.dense_int8_kernels [--texts 150] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import os
import sysconfig
import tempfile
from pathlib import Path
from time import process_time

import numpy as np


def email_pieces(count: int, size: int = 900) -> list[str]:
    """`count` pieces of `size` characters from the standard library's email package, in file order."""
    pieces: list[str] = []
    for source in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("email/*.py")):
        text = source.read_text(encoding="utf-8")
        pieces.extend(text[start:start + size] for start in range(0, len(text), size))
    return pieces[:count]


def main() -> None:
    from headwater.pipeline.dense_int8 import int8_model, signed_products_exact
    from headwater.pipeline.embed_dense import DenseEmbedder, dense_model_files
    from headwater.pipeline.onnx_session import cpu_session

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; onnxruntime's uint8 x int8 products exact on this CPU: {signed_products_exact()}")
    texts = email_pieces(args.texts)
    source = dense_model_files()[0]
    embedders = {"float32": DenseEmbedder(threads=1, int8=False)}
    with tempfile.TemporaryDirectory() as scratch:
        for label, unsigned in (("int8, signed weights", False), ("int8, unsigned weights", True)):
            embedder = DenseEmbedder(threads=1, int8=False)
            embedder._session = cpu_session(int8_model(source, Path(scratch), unsigned_weights=unsigned), 1)
            embedders[label] = embedder
        vectors = {label: e.embed(texts) for label, e in embedders.items()}  # also warms every session up
        cpu = {label: [] for label in embedders}
        for _ in range(args.rounds):
            for label, embedder in embedders.items():
                started = process_time()
                embedder.embed(texts)
                cpu[label].append((process_time() - started) / len(texts) * 1000)
    reference = vectors["float32"]
    print(f"\n{len(texts)} texts of up to 900 characters, one thread, CPU per text: median of {args.rounds} rounds")
    print(f"{'build':<24} {'cosine to float32 (mean / min)':>31} {'CPU per text':>13}")
    for label, found in vectors.items():
        cosines = (found * reference).sum(axis=1)
        print(f"{label:<24} {cosines.mean():>22.5f} / {cosines.min():.5f} {np.median(cpu[label]):>10.1f} ms")
    between = (vectors["int8, signed weights"] * vectors["int8, unsigned weights"]).sum(axis=1)
    print(f"\nsigned against unsigned build: mean cosine {between.mean():.6f}, min {between.min():.6f}")


if __name__ == "__main__":
    main()

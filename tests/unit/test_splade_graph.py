"""The SPLADE graph built without torch computes BertForMaskedLM's SPLADE weights: checked against numpy.

The reference below is a plain numpy forward pass of BERT written from the model's definition
(embeddings, attention, feed-forward, masked-LM head), sharing no code with headwater.pipeline.splade_graph.
"""

from __future__ import annotations

import json
from math import erf

import numpy as np
import pytest
from safetensors.numpy import load_file

from headwater.errors import ConfigurationError
from headwater.pipeline.embed_sparse import packaged_splade_dir
from headwater.pipeline.onnx_session import cpu_session
from headwater.pipeline.splade_graph import build_splade_graph, supports

TEXTS = ["Headwater keeps Chroma in sync.", "Deletes propagate to the collection " * 10,
         "x", "Rotate the token every quarter; restart the workers (all of them) afterwards!"]
_erf = np.vectorize(erf)


def _layer_norm(x, weight, bias, eps):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + eps) * weight + bias


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))


def numpy_splade(checkpoint, ids: list[int]) -> np.ndarray:
    """SPLADE weights of one text, in float64, straight from the checkpoint's tensors."""
    config = json.loads((checkpoint / "config.json").read_text())
    raw = {name.replace(".gamma", ".weight").replace(".beta", ".bias"): tensor.astype(np.float64)
           for name, tensor in load_file(str(checkpoint / "model.safetensors")).items()}
    w = {name.removeprefix("bert."): tensor for name, tensor in raw.items()}
    eps, heads = config["layer_norm_eps"], config["num_attention_heads"]
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:len(ids)]
    x = _layer_norm(x + w["embeddings.token_type_embeddings.weight"][0], w["embeddings.LayerNorm.weight"],
                    w["embeddings.LayerNorm.bias"], eps)
    dense = lambda v, p: v @ w[p + ".weight"].T + w[p + ".bias"]  # noqa: E731
    for layer in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{layer}."
        q, k, v = (dense(x, p + f"attention.self.{n}").reshape(len(ids), heads, -1).transpose(1, 0, 2)
                   for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(1, 0, 2).reshape(len(ids), -1)
        x = _layer_norm(dense(context, p + "attention.output.dense") + x, w[p + "attention.output.LayerNorm.weight"],
                        w[p + "attention.output.LayerNorm.bias"], eps)
        x = _layer_norm(dense(_gelu(dense(x, p + "intermediate.dense")), p + "output.dense") + x,
                        w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps)
    h = _layer_norm(_gelu(dense(x, "cls.predictions.transform.dense")), w["cls.predictions.transform.LayerNorm.weight"],
                    w["cls.predictions.transform.LayerNorm.bias"], eps)
    logits = h @ w["embeddings.word_embeddings.weight"].T + w["cls.predictions.bias"]
    return np.log1p(np.maximum(logits, 0)).max(axis=0)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    model_file = tmp_path_factory.mktemp("splade") / "model.onnx"
    build_splade_graph(packaged_splade_dir(), model_file)
    return cpu_session(model_file, threads=1)


def test_the_graph_computes_what_numpy_does(built):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(packaged_splade_dir() / "tokenizer.json"))
    tokenizer.no_padding()
    for text in TEXTS:
        ids = tokenizer.encode(text).ids
        got = built.run(None, {"input_ids": np.array([ids], dtype=np.int64)})[0][0]
        want = numpy_splade(packaged_splade_dir(), ids)
        assert got.shape == want.shape == (30522,)
        assert np.allclose(got, want, atol=2e-5), float(np.abs(got - want).max())
        # the active terms agree except where float32 and float64 round a weight right at zero
        assert len(np.setxor1d(np.flatnonzero(got), np.flatnonzero(want > 1e-6))) <= 2


def test_only_bert_checkpoints_with_safetensors_are_built_without_torch(tmp_path):
    assert supports(packaged_splade_dir())
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "distilbert"}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert not supports(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (tmp_path / "model.safetensors").unlink()
    assert not supports(tmp_path)  # pytorch_model.bin alone needs torch to read


def test_a_configuration_the_graph_cannot_compute_is_refused(tmp_path):
    config = json.loads((packaged_splade_dir() / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "hidden_act": "relu"}))
    (tmp_path / "model.safetensors").symlink_to(packaged_splade_dir() / "model.safetensors")
    with pytest.raises(ConfigurationError, match="hidden_act 'relu' is not supported without torch"):
        build_splade_graph(tmp_path, tmp_path / "model.onnx")


def test_the_export_needs_no_torch(tmp_path):
    """The quickstart install has no torch: exporting SPLADE-tiny must neither need nor import it."""
    import subprocess
    import sys

    script = ("import sys; from pathlib import Path; from headwater.pipeline.splade_export import export_splade; "
              "from headwater.pipeline.embed_sparse import packaged_splade_dir; "
              "export_splade(packaged_splade_dir(), Path(sys.argv[1])); "
              "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers'}))")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "export")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
    assert sorted(p.name for p in (tmp_path / "export").iterdir()) == ["model.onnx", "tokenizer.json"]


def test_the_torch_export_computes_the_same_vectors(built, tmp_path):
    """The torch path (the torch-export extra, for checkpoints the graph builder does not take) agrees with the
    built graph on SPLADE-tiny: same active terms, same weights to float tolerance, same word pieces."""
    from tokenizers import Tokenizer

    from headwater.pipeline.splade_export import _torch_export, save_tokenizer

    _torch_export(packaged_splade_dir(), tmp_path)
    traced = cpu_session(tmp_path / "model.onnx", threads=1)
    save_tokenizer(packaged_splade_dir(), tmp_path / "ours.json")
    theirs, ours = (Tokenizer.from_file(str(tmp_path / name)) for name in ("tokenizer.json", "ours.json"))
    for text in TEXTS + ["Ünïcödé, CamelCase and snake_case identifiers; 3.14 and 10,000 — URLs https://x.io/a?b=c"]:
        ids = ours.encode(text).ids
        assert theirs.encode(text).ids == ids
        got, want = (session.run(None, {"input_ids": np.array([ids], dtype=np.int64)})[0][0]
                     for session in (built, traced))
        assert np.array_equal(np.flatnonzero(got), np.flatnonzero(want))
        assert np.allclose(got, want, atol=1e-5), float(np.abs(got - want).max())

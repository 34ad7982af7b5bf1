"""The SPLADE ONNX graph of a BERT masked-LM checkpoint, written with the onnx package from its weights: no torch.

A SPLADE checkpoint is a BertForMaskedLM: its weights are plain tensors (a safetensors file), and
what it computes is a short, fixed sequence of matrix products, layer norms and softmaxes. This
module writes that sequence as an ONNX graph with those tensors as initialisers, so making the
export needs only `onnx`, `safetensors` and numpy, none of which pulls torch or CUDA.

The graph maps one text's token ids (batch x length, no padding, no attention mask) to its SPLADE
weights, log(1 + ReLU(max over tokens of the MLM logits)): the same function, and the same input
and output names, as the torch export it replaces (headwater.pipeline.splade_export).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from headwater.errors import ConfigurationError

WEIGHTS_FILE = "model.safetensors"
# Opset 17 has LayerNormalization, which onnxruntime fuses; every runtime since 1.14 reads it.
OPSET = 17


def supports(checkpoint: Path) -> bool:
    """Whether this module can build the checkpoint's graph: a BERT masked LM with safetensors weights."""
    try:
        config = json.loads((checkpoint / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return config.get("model_type") == "bert" and (checkpoint / WEIGHTS_FILE).is_file()


def build_splade_graph(checkpoint: Path, model_file: Path) -> None:
    """Write the SPLADE graph of the BERT masked-LM `checkpoint` into `model_file`."""
    import onnx

    config = json.loads((checkpoint / "config.json").read_text())
    _refuse_unsupported(checkpoint, config)
    graph = _BertSplade(_load_weights(checkpoint / WEIGHTS_FILE), config).graph()
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", OPSET)],
                                   producer_name="headwater")
    model.ir_version = 8  # readable by every onnxruntime since 1.14, like the opset
    onnx.checker.check_model(model)
    onnx.save(model, str(model_file))


def _refuse_unsupported(checkpoint: Path, config: dict) -> None:
    """A configuration this graph would compute differently is an error, never a silently different model."""
    if config.get("hidden_act", "gelu") != "gelu":
        raise ConfigurationError(f"{checkpoint}: hidden_act {config['hidden_act']!r} is not supported without torch "
                                 "(only gelu); install the torch-export extra to export this checkpoint")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ConfigurationError(f"{checkpoint}: position_embedding_type {config['position_embedding_type']!r} is "
                                 "not supported without torch; install the torch-export extra to export it")


def _load_weights(path: Path) -> dict[str, np.ndarray]:
    """The checkpoint's tensors by name, with the old LayerNorm names (gamma, beta) read as weight, bias."""
    from safetensors.numpy import load_file

    renamed = {".gamma": ".weight", ".beta": ".bias"}
    weights = {}
    for name, tensor in load_file(str(path)).items():
        for old, new in renamed.items():
            if name.endswith(old):
                name = name[: -len(old)] + new
        weights[name.removeprefix("bert.")] = np.ascontiguousarray(tensor, dtype=np.float32)
    return weights


class _BertSplade:
    """Builds the graph node by node; each method adds the nodes of one part of BERT and returns its output name."""

    def __init__(self, weights: dict[str, np.ndarray], config: dict) -> None:
        self.weights = weights
        self.hidden = int(config["hidden_size"])
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.epsilon = float(config.get("layer_norm_eps", 1e-12))
        self.nodes: list = []
        self.initializers: dict[str, np.ndarray] = {}

    def graph(self):
        import onnx

        hidden = self._embeddings("input_ids")
        for layer in range(self.layers):
            hidden = self._layer(hidden, f"encoder.layer.{layer}")
        logits = self._masked_lm_head(hidden)
        pooled = self._node("ReduceMax", [logits], axes=[1], keepdims=0)
        # Max-pooling before the activation is exact (ReLU and log1p are monotonic) and keeps the
        # activation to one row per text; ONNX has no Log1p, so log(1 + x).
        weights = self._node("Log", [self._node("Add", [self._node("Relu", [pooled]), self._constant("one", 1.0)])],
                             output="weights")
        vocabulary = self.weights["embeddings.word_embeddings.weight"].shape[0]
        inputs = [onnx.helper.make_tensor_value_info("input_ids", onnx.TensorProto.INT64, ["batch", "length"])]
        outputs = [onnx.helper.make_tensor_value_info(weights, onnx.TensorProto.FLOAT, ["batch", vocabulary])]
        initializers = [onnx.numpy_helper.from_array(array, name) for name, array in self.initializers.items()]
        return onnx.helper.make_graph(self.nodes, "splade", inputs, outputs, initializers)

    # -- building blocks -------------------------------------------------------------------------

    def _node(self, op: str, inputs: list[str], output: str | None = None, **attributes) -> str:
        import onnx

        output = output or f"{op.lower()}_{len(self.nodes)}"
        self.nodes.append(onnx.helper.make_node(op, inputs, [output], name=f"{op}_{len(self.nodes)}", **attributes))
        return output

    def _tensor(self, name: str) -> str:
        """A checkpoint tensor, as an initialiser (once, however often it is used)."""
        if name not in self.initializers:
            self.initializers[name] = self.weights[name]
        return name

    def _constant(self, name: str, value, dtype=np.float32) -> str:
        self.initializers.setdefault(name, np.array(value, dtype=dtype))
        return name

    def _linear(self, x: str, prefix: str) -> str:
        """x @ W.T + b, with W stored transposed once (torch keeps out x in; MatMul wants in x out)."""
        transposed = f"{prefix}.weight.T"
        if transposed not in self.initializers:
            self.initializers[transposed] = np.ascontiguousarray(self.weights[f"{prefix}.weight"].T)
        return self._node("Add", [self._node("MatMul", [x, transposed]), self._tensor(f"{prefix}.bias")])

    def _layer_norm(self, x: str, prefix: str) -> str:
        return self._node("LayerNormalization", [x, self._tensor(f"{prefix}.weight"), self._tensor(f"{prefix}.bias")],
                          axis=-1, epsilon=self.epsilon)

    def _gelu(self, x: str) -> str:
        """The exact (erf) GELU of BERT's "gelu"; onnxruntime fuses this pattern into one Gelu kernel."""
        scaled = self._node("Div", [x, self._constant("sqrt_two", math.sqrt(2.0))])
        one_plus = self._node("Add", [self._node("Erf", [scaled]), self._constant("one", 1.0)])
        return self._node("Mul", [self._node("Mul", [x, one_plus]), self._constant("half", 0.5)])

    # -- BERT ------------------------------------------------------------------------------------

    def _embeddings(self, input_ids: str) -> str:
        """Word + position + token type 0 embeddings, layer-normed (every text is one segment, unpadded)."""
        words = self._node("Gather", [self._tensor("embeddings.word_embeddings.weight"), input_ids], axis=0)
        length = self._node("Gather", [self._node("Shape", [input_ids]), self._constant("index_one", 1, np.int64)],
                            axis=0)
        positions = self._node("Range", [self._constant("zero_i64", 0, np.int64), length,
                                         self._constant("one_i64", 1, np.int64)])
        placed = self._node("Gather", [self._tensor("embeddings.position_embeddings.weight"), positions], axis=0)
        segment = self._constant("token_type_0", self.weights["embeddings.token_type_embeddings.weight"][0])
        summed = self._node("Add", [self._node("Add", [words, placed]), segment])
        return self._layer_norm(summed, "embeddings.LayerNorm")

    def _layer(self, x: str, prefix: str) -> str:
        attended = self._layer_norm(self._node("Add", [self._linear(self._attention(x, prefix), f"{prefix}.attention.output.dense"), x]),
                                    f"{prefix}.attention.output.LayerNorm")
        expanded = self._gelu(self._linear(attended, f"{prefix}.intermediate.dense"))
        return self._layer_norm(self._node("Add", [self._linear(expanded, f"{prefix}.output.dense"), attended]),
                                f"{prefix}.output.LayerNorm")

    def _attention(self, x: str, prefix: str) -> str:
        """Multi-head self-attention over every token (no mask: a text runs alone, unpadded)."""
        head_size = self.hidden // self.heads
        split = self._constant("split_heads", [0, 0, self.heads, head_size], np.int64)

        def heads(name: str, perm: list[int]) -> str:  # batch x heads x length x head_size (or x length, for keys)
            projected = self._linear(x, f"{prefix}.attention.self.{name}")
            return self._node("Transpose", [self._node("Reshape", [projected, split])], perm=perm)

        query, key, value = heads("query", [0, 2, 1, 3]), heads("key", [0, 2, 3, 1]), heads("value", [0, 2, 1, 3])
        scores = self._node("Div", [self._node("MatMul", [query, key]),
                                    self._constant("sqrt_head_size", math.sqrt(head_size))])
        context = self._node("MatMul", [self._node("Softmax", [scores], axis=-1), value])
        merged = self._node("Transpose", [context], perm=[0, 2, 1, 3])
        return self._node("Reshape", [merged, self._constant("merge_heads", [0, 0, self.hidden], np.int64)])

    def _masked_lm_head(self, x: str) -> str:
        """Transform (dense, gelu, layer norm), then the vocabulary projection (tied to the word embeddings unless
        the checkpoint has its own decoder weights)."""
        transformed = self._layer_norm(self._gelu(self._linear(x, "cls.predictions.transform.dense")),
                                       "cls.predictions.transform.LayerNorm")
        decoder = "cls.predictions.decoder.weight"
        if decoder not in self.weights:
            decoder = "embeddings.word_embeddings.weight"
        bias = "cls.predictions.bias" if "cls.predictions.bias" in self.weights else "cls.predictions.decoder.bias"
        projection = self._node("Transpose", [self._tensor(decoder)], perm=[1, 0])
        return self._node("Add", [self._node("MatMul", [transformed, projection]), self._tensor(bias)])

"""The int8 build's weight storage: unsigned weights compute the signed build's integer products."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

from headwater.pipeline.dense_int8 import PROBE_MODEL, PROBE_SHAPE, _store_weights_unsigned, signed_products_exact


def signed_and_unsigned(tmp_path, weights: np.ndarray):
    """A float MatMul with constant weights, quantised as the dense build is (dynamic, per channel),
    and the same build with its weights stored unsigned; returns (signed file, unsigned file)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rows, columns = weights.shape
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])], "matmul",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, rows])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, columns])],
        [numpy_helper.from_array(weights.astype(np.float32), "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    plain, quantized = tmp_path / "plain.onnx", tmp_path / "signed.onnx"
    onnx.save(model, str(plain))
    quantize_dynamic(plain, quantized, weight_type=QuantType.QInt8, per_channel=True,
                     extra_options={"MatMulConstBOnly": True})
    unsigned = tmp_path / "unsigned.onnx"
    unsigned.write_bytes(quantized.read_bytes())
    _store_weights_unsigned(unsigned)
    return quantized, unsigned


def run(model_file, inputs: np.ndarray) -> np.ndarray:
    session = onnxruntime.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
    return session.run(None, {"X": inputs})[0]


def test_unsigned_weights_give_the_signed_builds_results_exactly(tmp_path):
    weights = np.random.default_rng(3).normal(size=(32, 8))
    signed, unsigned = signed_and_unsigned(tmp_path, weights)
    # One positive input per row: each 16-bit pair sum holds a single product, so the signed
    # products are exact on every CPU and the two builds must agree to the last bit.
    inputs = np.zeros((32, 32), dtype=np.float32)
    inputs[np.arange(32), np.arange(32)] = np.linspace(0.5, 3.0, 32)
    assert np.array_equal(run(unsigned, inputs), run(signed, inputs))
    graph = onnx.load(str(unsigned)).graph
    stored = {t.name: numpy_helper.to_array(t).dtype for t in graph.initializer}
    matmuls = [n for n in graph.node if n.op_type == "MatMulInteger"]
    assert matmuls and all(stored[n.input[1]] == np.uint8 and stored[n.input[3]] == np.uint8 for n in matmuls)


def test_the_probe_predicts_whether_the_signed_build_saturates(tmp_path):
    weights = np.random.default_rng(4).normal(size=(64, 8))
    signed, unsigned = signed_and_unsigned(tmp_path, weights)
    inputs = np.random.default_rng(5).uniform(0.0, 4.0, size=(16, 64)).astype(np.float32)
    # Full-range activations: where the probe finds signed products exact (VNNI, AMX) the two builds
    # agree to the last bit; where it finds them saturating (AVX2 alone) the signed build differs.
    assert np.array_equal(run(unsigned, inputs), run(signed, inputs)) == signed_products_exact()
    # Either way the unsigned build is the quantised product: float32's within quantisation error.
    assert np.allclose(run(unsigned, inputs), inputs @ weights.astype(np.float32), rtol=0.05, atol=0.5)


def test_the_probe_is_one_uint8_by_int8_matrix_product_of_its_stated_shape():
    model = onnx.load_from_string(PROBE_MODEL)
    onnx.checker.check_model(model)
    rows, depth, columns = PROBE_SHAPE
    assert [n.op_type for n in model.graph.node] == ["MatMulInteger"]
    shapes = {v.name: (v.type.tensor_type.elem_type, [d.dim_value for d in v.type.tensor_type.shape.dim])
              for v in [*model.graph.input, *model.graph.output]}
    assert shapes == {"A": (TensorProto.UINT8, [rows, depth]), "B": (TensorProto.INT8, [depth, columns]),
                      "Y": (TensorProto.INT32, [rows, columns])}

"""ONNX files that valid exporters write: scalar weights, transformer blocks, and the error line."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from extract import load_model
from extract.equivalence import run_module


def _save(tmp_path, name: str, nodes, inputs, outputs, initializers, opset: int = 17) -> str:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return str(path)


def test_a_scalar_initializer_imports_and_runs(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 64)).astype(np.float32)
    path = _save(
        tmp_path,
        "scaled",
        [helper.make_node("MatMul", ["X", "W"], ["T"]), helper.make_node("Mul", ["T", "s"], ["Y"])],
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 16, 64])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 16, 64])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.array(0.5, np.float32), "s")],
    )
    model = load_model(path, seq_len=4)
    assert [p.shape for p in model.params] == [(64, 64), ()]
    (out,) = run_module(model.mod, model.inputs + model.params)
    np.testing.assert_allclose(out, model.inputs[0] @ w * 0.5, rtol=1e-4, atol=1e-4)

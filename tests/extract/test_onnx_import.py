"""ONNX files that valid exporters write: scalar weights, transformer blocks, and the error line."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from extract import ModelImportError, load_model
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


def _int64(name: str, value) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(value, np.int64)))


def test_shape_arithmetic_on_a_dynamic_input_is_folded(tmp_path):
    # TorchScript's exports build masks from the sequence length: x + ConstantOfShape(Shape(x)[2:2])
    # is x + 1 through a scalar made from an empty shape, which TVM's importer cannot broadcast.
    path = _save(
        tmp_path,
        "masked",
        [
            helper.make_node("Shape", ["x"], ["shape"]),
            _int64("two", [2]),
            helper.make_node("Slice", ["shape", "two", "two"], ["empty"]),
            helper.make_node("ConstantOfShape", ["empty"], ["one"],
                             value=numpy_helper.from_array(np.array([1.0], np.float32))),
            helper.make_node("Add", ["x", "one"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seq"])],
        [],
    )
    model = load_model(path, seq_len=5)
    (out,) = run_module(model.mod, model.inputs + model.params)
    np.testing.assert_allclose(out, model.inputs[0] + 1)
    np.testing.assert_allclose(out, model.reference_outputs()[0])


def test_an_importer_failure_names_the_onnx_node(tmp_path, capsys):
    # A scalar from an empty shape that depends on the data (NonZero) cannot be folded.
    path = _save(
        tmp_path,
        "unfoldable",
        [
            helper.make_node("NonZero", ["x"], ["nz"]),
            helper.make_node("Shape", ["nz"], ["shape"]),
            _int64("zero", [0]),
            helper.make_node("Slice", ["shape", "zero", "zero"], ["empty"]),
            helper.make_node("ConstantOfShape", ["empty"], ["one"], name="scalar_one",
                             value=numpy_helper.from_array(np.array([1.0], np.float32))),
            helper.make_node("Add", ["x", "one"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [],
    )
    with pytest.raises(ModelImportError) as info:
        load_model(path)
    message = str(info.value)
    assert message.startswith("TVM's ONNX importer failed on node ConstantOfShape 'scalar_one': broadcast_to ")
    assert "\n" not in message
    assert "Error converting operator" not in capsys.readouterr().out


def _bert(transformers):
    config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=32)
    return transformers.BertModel(config)


def _gpt2(transformers):
    config = transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=2, n_positions=32,
                                     use_cache=False, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2Model(config)


@pytest.mark.slow
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("build", [_bert, _gpt2], ids=["bert", "gpt2"])
def test_transformer_exports_import(tmp_path, build, exporter):
    """Tiny BERT and GPT-2 (LayerNorm, GELU, biased projections, an attention mask), as exported."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if exporter == "dynamo":
        pytest.importorskip("onnxscript", reason="the dynamo exporter needs onnxscript")
    torch.manual_seed(0)

    class Hidden(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model.eval()

        def forward(self, ids, mask):
            return self.model(input_ids=ids, attention_mask=mask, return_dict=False)[0]

    args = (torch.randint(0, 64, (1, 8)), torch.ones(1, 8, dtype=torch.int64))
    path = tmp_path / f"{build.__name__}-{exporter}.onnx"
    if exporter == "dynamo":
        seq = torch.export.Dim("seq", min=2, max=32)
        options = {"opset_version": 18, "dynamic_shapes": {"ids": {1: seq}, "mask": {1: seq}}}
    else:
        options = {"opset_version": 17, "dynamic_axes": {"ids": {1: "seq"}, "mask": {1: "seq"}}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Hidden(build(transformers)), args, str(path), dynamo=exporter == "dynamo",
                          input_names=["ids", "mask"], output_names=["hidden"], **options)
    model = load_model(str(path), seq_len=6)
    assert [a.shape for a in model.inputs] == [(1, 6), (1, 6)]
    (out,) = run_module(model.mod, model.inputs + model.params)
    assert out.shape == (1, 6, 32)
    np.testing.assert_allclose(out, model.reference_outputs()[0], rtol=1e-4, atol=1e-4)

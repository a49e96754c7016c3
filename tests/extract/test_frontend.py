"""Model import to Relax: decoder layers (tiny configs) and ONNX files."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import tvm
from tvm import relax

from extract import ImportedModel, ModelImportError, known_models, load_model
from extract.imported import operator_error

SEQ_LEN, KV_LEN, LAYERS = 8, 12, 2
TINY = {"hidden": 64, "kv_heads": 2, "head_dim": 16}


def _build(model: ImportedModel) -> relax.VirtualMachine:
    executable = relax.build(model.mod, target=tvm.target.Target({"kind": "llvm"}))
    return relax.VirtualMachine(executable, tvm.cpu())


def _run(vm: relax.VirtualMachine, model: ImportedModel, inputs=None) -> list[np.ndarray]:
    args = [
        tvm.runtime.tensor(np.ascontiguousarray(a)) for a in (inputs or model.inputs) + model.params
    ]
    out = vm["main"](*args)
    if isinstance(out, tvm.runtime.Tensor):
        return [out.numpy()]
    return [o.numpy() for o in out]


@pytest.fixture(scope="module")
def prefill() -> ImportedModel:
    return load_model("qwen3-tiny", "prefill", seq_len=SEQ_LEN, layers=LAYERS, seed=1)


@pytest.fixture(scope="module")
def prefill_vm(prefill) -> relax.VirtualMachine:
    return _build(prefill)


@pytest.fixture(scope="module")
def decode() -> ImportedModel:
    return load_model("qwen3-tiny", "decode", kv_len=KV_LEN, layers=LAYERS, seed=2)


def test_known_models():
    assert {
        "llama-3.2-1b",
        "llama-tiny",
        "qwen2.5-0.5b",
        "qwen2.5-tiny",
        "qwen3-0.6b",
        "qwen3-1.7b",
        "qwen3-tiny",
    } <= set(known_models())


def _check_signature(model: ImportedModel) -> None:
    func = model.mod["main"]
    assert int(func.attrs["num_input"]) == len(model.inputs) == len(model.input_names)
    assert "params" not in func.attrs
    assert (
        len(func.params)
        == len(model.inputs) + len(model.params)
        == len(model.inputs) + len(model.param_names)
    )
    for var, array, name in zip(
        func.params, model.inputs + model.params, model.input_names + model.param_names
    ):
        assert var.name == name
        assert [int(d) for d in var.ty.shape] == list(array.shape)
        assert var.ty.dtype == str(array.dtype)


def test_prefill_import(prefill):
    _check_signature(prefill)
    assert prefill.input_names == ("hidden_states",)
    assert prefill.inputs[0].shape == (1, SEQ_LEN, TINY["hidden"])
    assert len(prefill.params) == 11 * LAYERS  # 7 projections + 4 RMSNorm scales per layer
    assert prefill.source == f"qwen3-tiny prefill seq_len={SEQ_LEN} layers={LAYERS}"
    assert prefill.flops and prefill.flops > 0
    assert prefill.output_names == ("hidden_states", "key_0", "value_0", "key_1", "value_1")


@pytest.mark.slow
def test_prefill_matches_torch(prefill, prefill_vm):
    out = _run(prefill_vm, prefill)
    ref = prefill.reference_outputs()
    assert len(out) == len(ref) == 1 + 2 * LAYERS
    kv_shape = (1, TINY["kv_heads"], SEQ_LEN, TINY["head_dim"])
    assert [o.shape for o in out] == [prefill.inputs[0].shape] + [kv_shape] * 2 * LAYERS
    for got, want in zip(out, ref):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_prefill_is_causal(prefill, prefill_vm):
    changed = prefill.inputs[0].copy()
    changed[:, -1] += 1.0
    before = _run(prefill_vm, prefill)[0]
    after = _run(prefill_vm, prefill, (changed,))[0]
    np.testing.assert_allclose(after[:, :-1], before[:, :-1], rtol=1e-5, atol=1e-6)
    assert not np.allclose(after[:, -1], before[:, -1])


@pytest.mark.slow
def test_decode_matches_torch(decode):
    _check_signature(decode)
    assert decode.input_names == ("hidden_states",) + tuple(
        f"past_{kind}_{i}" for i in range(LAYERS) for kind in ("key", "value")
    )
    assert decode.source == f"qwen3-tiny decode kv_len={KV_LEN} layers={LAYERS}"
    out = _run(_build(decode), decode)
    ref = decode.reference_outputs()
    assert out[0].shape == (1, 1, TINY["hidden"])
    for got, _want, past in zip(out[1:], ref[1:], decode.inputs[1:]):
        assert got.shape == (1, TINY["kv_heads"], KV_LEN + 1, TINY["head_dim"])
        np.testing.assert_array_equal(
            got[:, :, :KV_LEN], past
        )  # the cache is extended, not rewritten
    for got, want in zip(out, ref):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_prefill_kv_continues_a_prefill():
    """A chunk over the cache of a prefill's first tokens = the prefill's last rows."""
    past, chunk = 6, 4
    whole = load_model("qwen3-tiny", "prefill", seq_len=past + chunk, layers=1, seed=3)
    hidden, key, value = whole.reference_outputs()
    model = load_model("qwen3-tiny", "prefill-kv", seq_len=chunk, kv_len=past, layers=1, seed=3)
    _check_signature(model)
    assert model.input_names == ("hidden_states", "past_key_0", "past_value_0")
    assert model.source == f"qwen3-tiny prefill-kv seq_len={chunk} kv_len={past} layers=1"
    assert all(np.array_equal(a, b) for a, b in zip(model.params, whole.params, strict=True))
    inputs = (whole.inputs[0][:, past:], key[:, :, :past], value[:, :, :past])
    vm = _build(model)
    out = _run(vm, model, inputs)
    np.testing.assert_allclose(out[0], hidden[:, past:], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out[1], key, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out[2], value, rtol=1e-4, atol=1e-4)
    own = _run(vm, model)  # its own random cache, against PyTorch
    for got, want in zip(own, model.reference_outputs(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("name", "stage", "n_params"),
    [
        ("llama-tiny", "prefill-kv", 9),  # 7 projections + 2 RMSNorm scales
        ("qwen2.5-tiny", "decode", 12),  # and Q/K/V biases
    ],
)
@pytest.mark.slow
def test_other_architectures_match_torch(name, stage, n_params):
    model = load_model(name, stage, seq_len=3, kv_len=5, layers=1, seed=4)
    _check_signature(model)
    assert len(model.params) == n_params
    out = _run(_build(model), model)
    new = 1 if stage == "decode" else 3
    assert out[0].shape == (1, new, TINY["hidden"])
    assert out[1].shape == (1, TINY["kv_heads"], 5 + new, TINY["head_dim"])
    for got, want in zip(out, model.reference_outputs(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_hash_and_seed():
    a = load_model("qwen3-tiny", seq_len=4, seed=0)
    b = load_model("Qwen/Qwen3-Tiny", seq_len=4, seed=3)
    c = load_model("qwen3-tiny", seq_len=5, seed=0)
    assert a.model_hash == b.model_hash != c.model_hash  # the seed changes data, not the model
    assert not np.array_equal(a.params[0], b.params[0])
    assert not a.params[0].flags.writeable


def test_torch_eager(prefill):
    times = prefill.torch_eager(repeat=3)
    assert len(times) == 3 and all(t > 0 for t in times)


def test_onnx_import(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.SiLU(), torch.nn.Linear(32, 16)
    ).eval()
    path = tmp_path / "mlp.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            net,
            (torch.randn(1, 4, 16),),
            str(path),
            dynamo=False,
            input_names=["x"],
            output_names=["y"],
            dynamic_axes={"x": {1: "seq"}},
        )
    model = load_model(str(path), seq_len=6)
    _check_signature(model)
    assert model.inputs[0].shape == (1, 6, 16) and len(model.params) == 4
    assert model.output_names == ("y",) and not model.has_torch
    out = _run(_build(model), model)
    np.testing.assert_allclose(out[0], model.reference_outputs()[0], rtol=1e-4, atol=1e-4)
    assert load_model(str(path), seq_len=7).model_hash != model.model_hash
    with pytest.raises(NotImplementedError):
        model.torch_eager()


def _onnx_with(tmp_path, op_type: str, inputs: list[str]):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    info = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    graph = helper.make_graph(
        [helper.make_node(op_type, inputs, ["y"])],
        "g",
        info,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    path = tmp_path / f"{op_type}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"name_or_path": "llama-7b"},
            "unknown model 'llama-7b'; known models: llama-3.2-1b, llama-tiny, qwen2.5-0.5b,",
        ),
        ({"name_or_path": "qwen3-tiny", "stage": "train"}, "unknown stage 'train'"),
        ({"name_or_path": "qwen3-tiny", "seq_len": 0}, "seq_len must be a positive integer, got 0"),
        ({"name_or_path": "qwen3-tiny", "kv_len": -1}, "kv_len must be a positive integer, got -1"),
        ({"name_or_path": "qwen3-tiny", "layers": 0}, "layers must be a positive integer, got 0"),
        (
            {"name_or_path": "qwen3-tiny", "layers": 3},
            "layers=3 exceeds the model's num_hidden_layers=2",
        ),
        ({"name_or_path": "missing.onnx"}, "ONNX file not found: missing.onnx"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ModelImportError, match="^" + re.escape(message)) as info:
        load_model(**kwargs)
    assert "\n" not in str(info.value)


def test_bad_onnx_files(tmp_path):
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x00\xffnot a model\x13")
    with pytest.raises(ModelImportError, match="^malformed ONNX file .*garbage.onnx: "):
        load_model(str(garbage))
    with pytest.raises(
        ModelImportError, match="^malformed ONNX file .*Relu.onnx: .*topologically sorted"
    ):
        load_model(_onnx_with(tmp_path, "Relu", ["x", "undefined"]))
    with pytest.raises(
        ModelImportError, match="^TVM's ONNX importer does not support operator\\(s\\): Celu$"
    ):
        load_model(_onnx_with(tmp_path, "Celu", ["x"]))


def test_operator_error_names_torch_ops():
    err = operator_error(
        "TVM's torch importer", AssertionError("Unsupported function types ['foo.default']")
    )
    assert str(err) == "TVM's torch importer does not support operator(s): foo.default"
    err = operator_error("TVM's torch importer", ValueError("shape mismatch\nTraceback..."))
    assert str(err) == "TVM's torch importer failed: shape mismatch"


@pytest.mark.slow
def test_config_json_path(tmp_path):
    import json

    from extract.frontend import CONFIG_DIR

    config = json.loads((CONFIG_DIR / "qwen3-tiny.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    model = load_model(str(path), seq_len=4)
    assert model.source == f"{path} prefill seq_len=4 layers=1"  # the path as given, not its base name
    assert model.model_hash == load_model("qwen3-tiny", seq_len=4).model_hash
    path.write_text(json.dumps({**config, "model_type": "gpt2"}))
    with pytest.raises(
        ModelImportError,
        match="^unsupported architecture 'gpt2' in .*config.json; supported: qwen3, qwen2, llama$",
    ):
        load_model(str(path))
    path.write_text(json.dumps({"model_type": "qwen3", "hidden_size": 64}))
    with pytest.raises(ModelImportError, match="^config .*config.json lacks intermediate_size, num_attention_heads, "
                                               "num_key_value_heads, head_dim: "):
        load_model(str(path))


DROP = object()  # a key left out of the config file


@pytest.mark.parametrize("change, message, before_import", [
    ({"hidden_size": "64"}, "bad qwen3 config .*: hidden_size must be a positive integer, got '64'", True),
    ({"num_attention_heads": 0}, "bad qwen3 config .*: num_attention_heads must be a positive integer, got 0", True),
    ({"model_type": None}, "unsupported architecture None in ", True),
    ({"num_key_value_heads": DROP}, "lacks num_key_value_heads: ", True),
    ({"head_dim": DROP}, "lacks head_dim: ", True),
    ({"hidden_act": "nope"}, "bad qwen3 config .*: KeyError: 'nope'", False),
    ({"rope_theta": "abc"}, "bad qwen3 config .*: TypeError: ", False),
    ({"rms_norm_eps": "x"}, "bad qwen3 config .*: StrictDataclassFieldValidationError: .*rms_norm_eps", False),
])
def test_bad_config_values_are_model_import_errors(tmp_path, change, message, before_import):
    """A config value transformers cannot build a layer from is a ModelImportError naming the file, not a crash;
    the checks that need no model import (``before_import``) are made by check_model too."""
    import json

    from extract import check_model
    from extract.frontend import CONFIG_DIR

    config = json.loads((CONFIG_DIR / "qwen3-tiny.json").read_text())
    config.update(change)
    config = {k: v for k, v in config.items() if v is not DROP}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ModelImportError, match=message):
        load_model(str(path), seq_len=4)
    if before_import:
        with pytest.raises(ModelImportError, match=message):
            check_model(str(path), seq_len=4)
    else:
        assert check_model(str(path), seq_len=4).config["model_type"] == "qwen3"  # only building finds it

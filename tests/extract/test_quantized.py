"""A tiny Qwen3 decode layer with quantized linear weights: the program, its kernels, its two checks."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

from extract import load_model
from extract.frontend import check_model, torch_module
from extract.quant import WeightFormat
from extract.quantized import CHECK_TOLERANCE, quantize_model
from measure.tvmapi import ArgInfo, Schedule, make_target, tirx
from tuner.compile import VerificationError, prepare_weights, verify
from tuner.kernels import kernel_reference, kernels_of, lower_to_kernels
from tuner.space.space import ScheduleSpace

pytestmark = pytest.mark.slow  # builds a layer

FORMATS = [WeightFormat("bfloat16"), WeightFormat("int8"), WeightFormat("int4", 32)]
ARGS = {"stage": "decode", "kv_len": 16}


@pytest.fixture(scope="module")
def float_model():
    return load_model("qwen3-tiny", **ARGS)


@pytest.fixture(scope="module", params=FORMATS, ids=lambda f: f.label)
def quantized(request, float_model):
    source = check_model("qwen3-tiny", **ARGS)
    return quantize_model(float_model, request.param, lambda: torch_module(source, **ARGS))


def run(model, params=None) -> list[np.ndarray]:
    vm = relax.VirtualMachine(relax.build(model.mod, target="llvm"), tvm.cpu())
    args = list(model.inputs) + list(model.params if params is None else params)
    return [o.numpy() for o in vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(a)) for a in args])]


def test_only_the_projections_are_quantized(quantized):
    names = set(quantized.weights)
    assert {n.rsplit("_", 2)[0].split("_")[-1] for n in names} == {"q", "k", "v", "o", "gate", "up", "down"}
    stored = dict(zip(quantized.model.param_names, quantized.model.params))
    for name, array in stored.items():
        if "norm" in name:
            assert array.dtype == np.float32
    assert quantized.weight_bytes()["resident"] == sum(a.nbytes for a in stored.values())


def test_check_a_the_program_equals_the_float64_reference_of_the_same_quantized_model(quantized, float_model):
    outputs = run(quantized.model)
    err = verify(tuple(outputs), quantized.model.reference_outputs(), CHECK_TOLERANCE, CHECK_TOLERANCE)
    assert err < CHECK_TOLERANCE / 10
    # check (b): what quantization costs is far above that, and reported per output
    cost = quantized.cost(outputs)
    assert cost["max_abs_error"] > 10 * CHECK_TOLERANCE
    assert set(cost["outputs"]) == set(float_model.output_names)
    assert 0 < cost["max_rel_error"] < 1


def test_check_a_fails_a_wrong_dequantization(quantized):
    """Weights read in the wrong order (rows of each stored array reversed): the check must see it."""
    params = [p[::-1].copy() if p.ndim == 2 and p.dtype != np.float32 else p for p in quantized.model.params]
    with pytest.raises(VerificationError):
        verify(tuple(run(quantized.model, params)), quantized.model.reference_outputs(), CHECK_TOLERANCE,
               CHECK_TOLERANCE)


def _allocated(func) -> list:
    """The buffers a kernel allocates (its root block's and its top-level blocks')."""
    sch = Schedule(func)
    root = sch.get_sblock("root")
    return [b for rv in [root, *sch.get_child_blocks(root)] for b in sch.get(rv).alloc_buffers]


def _elements(shape) -> int:
    return int(np.prod([int(d) for d in shape]))


def test_dequantization_is_fused_into_the_gemm_with_no_float_copy_of_a_weight(quantized):
    """Every kernel of the lowered program (FuseOps and FuseTIR, after the weights' work is lifted) that reads
    a stored weight reads it as stored and allocates nothing of a weight's size; no kernel writes a float32
    tensor as large as a weight."""
    fused = lower_to_kernels(prepare_weights(quantized.model.mod))
    weight_elements = min(int(np.prod(w.shape)) for w in quantized.weights.values())
    low = {"bfloat16", "int8", "uint8"}
    for gv, func in fused.functions.items():
        if isinstance(func, tirx.PrimFunc):
            for b in ArgInfo.from_prim_func(func):
                if str(b.dtype) == "float32":
                    assert _elements(b.shape) < weight_elements, (gv.name_hint, b.shape)
    readers = [k for k in kernels_of(fused) if any(str(b.dtype) in low for b in ArgInfo.from_prim_func(k.func))]
    for k in readers:
        assert all(_elements(b.shape) < weight_elements for b in _allocated(k.func)), k.name
    assert sum(k.calls for k in readers) == len(quantized.weights)  # one GEMM kernel call per quantized weight


def test_the_gemm_kernels_are_checked_on_random_weights_and_tunable(quantized):
    fused = lower_to_kernels(prepare_weights(quantized.model.mod))
    kernel = next(k for k in kernels_of(fused) if k.name.startswith(f"dense_{quantized.format.dtype}"))
    if quantized.format.dtype != "int4":  # the cast weight times x, as the GEMM rules know it
        assert kernel.workload.op_kind == "matmul"
    ref = kernel_reference(kernel)
    assert np.abs(ref.arrays[-1]).max() > 0  # random stored weights, not zeros
    space = ScheduleSpace(kernel.func, kernel.workload.workload_hash, make_target({"kind": "llvm", "num-cores": 2}))
    schedules = space.sample(2)
    assert schedules
    for sched in schedules:
        lib = tvm.compile(sched.mod, target="llvm")
        args = [tvm.runtime.tensor(a) for a in ref.arrays[:-1]] + [tvm.runtime.empty(ref.arrays[-1].shape, "float32")]
        lib["main"](*args)
        np.testing.assert_allclose(args[-1].numpy(), ref.arrays[-1], rtol=1e-5, atol=1e-5)


def test_the_candidate_checks_take_bfloat16_weights_at_any_address():
    """NumPy's DLPack export refuses ml_dtypes' bfloat16: an aligned array (shared otherwise) is copied."""
    import ml_dtypes

    from extract.equivalence import _host_tensor

    raw = np.zeros(64 * 4 + 64, dtype=np.uint8)
    start = -raw.ctypes.data % 64
    aligned = raw[start:start + 64 * 4].view(ml_dtypes.bfloat16).reshape(8, 16)
    aligned[:] = np.arange(128, dtype=np.float32).reshape(8, 16)
    assert aligned.ctypes.data % 64 == 0
    tensor = _host_tensor(aligned)
    assert str(tensor.dtype) == "bfloat16" and tensor.shape == (8, 16)

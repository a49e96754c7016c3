"""The fused attention kernel: it computes softmax attention, its row-wise seeds compute the same and replay."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te, topi

from extract.ops.kernels import attention_te
from measure.tvmapi import apply_trace, make_target
from tuner.space.attention_seeds import attention_seeds
from tuner.space.gemm_seeds import vector_lanes
from tuner.space.space import ScheduleSpace

TARGET = make_target({"kind": "llvm", "num-cores": 2})
HEADS, KV_HEADS, ROWS, KEYS = 4, 2, 3, 40
SCALE = 0.125


def _kernel(depth: int, mask_dims: tuple[int, ...], fast: bool):
    q = te.placeholder((1, HEADS, ROWS, depth), name="q")
    k = te.placeholder((1, KV_HEADS, KEYS, depth), name="k")
    v = te.placeholder((1, KV_HEADS, KEYS, depth), name="v")
    m = te.placeholder(mask_dims, name="m")
    return te.create_prim_func([q, k, v, m, attention_te(q, k, v, m, SCALE, fast)])


def _inputs(depth: int, mask_dims: tuple[int, ...]) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, HEADS, ROWS, depth)).astype("float32")
    k = rng.standard_normal((1, KV_HEADS, KEYS, depth)).astype("float32")
    v = rng.standard_normal((1, KV_HEADS, KEYS, depth)).astype("float32")
    mask = np.zeros(mask_dims, "float32")
    mask[..., -5:] = np.finfo("float32").min  # masked keys, as a causal mask writes them
    return [q, k, v, mask]


def _reference(q, k, v, mask) -> np.ndarray:
    """softmax(q k^T * scale + mask) v in float64, K and V heads repeated for the query heads."""
    group = HEADS // KV_HEADS
    k64, v64 = (np.repeat(t.astype("float64"), group, axis=1) for t in (k, v))
    z = q.astype("float64") @ k64.transpose(0, 1, 3, 2) * SCALE + mask.astype("float64")
    p = np.exp(z - z.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v64


def _run(mod: tvm.IRModule, args: list[np.ndarray], depth: int) -> np.ndarray:
    out = tvm.runtime.tensor(np.zeros((1, HEADS, ROWS, depth), "float32"))
    tvm.compile(mod, TARGET)["main"](*(tvm.runtime.tensor(a) for a in args), out)
    return out.numpy()


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("mask_dims", [(1, 1, ROWS, KEYS), (ROWS, KEYS)])
def test_attention_kernel_and_its_seeds_compute_softmax_attention(fast, mask_dims):
    depth = 2 * vector_lanes(TARGET)
    func = _kernel(depth, mask_dims, fast)
    args = _inputs(depth, mask_dims)
    want = _reference(*args)
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    np.testing.assert_allclose(_run(mod, args, depth), want, rtol=1e-5, atol=1e-5)
    seeds = attention_seeds(func, TARGET)
    assert len(seeds) == 2  # D is a multiple of the vector width: the dot products vectorised too
    for sch in seeds:
        script = sch.mod.script()
        assert "T.parallel" in script and "T.vectorized" in script
        np.testing.assert_allclose(_run(sch.mod, args, depth), want, rtol=1e-5, atol=1e-5)
    assert "_rf" in seeds[1].mod.script()


def test_dot_products_stay_serial_when_d_is_not_a_multiple_of_the_vector():
    depth = vector_lanes(TARGET) * 3 // 2
    seeds = attention_seeds(_kernel(depth, (1, 1, ROWS, KEYS), True), TARGET)
    assert len(seeds) == 1 and "_rf" not in seeds[0].mod.script()


def test_kernels_of_another_form_get_none():
    x = te.placeholder((4, 64), name="x")
    softmax = te.create_prim_func([x, topi.nn.softmax(x, axis=-1)])
    assert attention_seeds(softmax, TARGET) == []
    assert attention_seeds(_kernel(16, (1, 1, ROWS, KEYS), False), make_target({"kind": "c"})) == []


def test_the_space_seeds_attention_and_its_traces_replay():
    depth = vector_lanes(TARGET)
    func = _kernel(depth, (1, 1, ROWS, KEYS), True)
    seeds = ScheduleSpace(func, "attention-test", TARGET).seeds()
    assert seeds
    args = _inputs(depth, (1, 1, ROWS, KEYS))
    for seed in seeds:
        replayed = apply_trace(func.with_attr("global_symbol", "main"), seed.record.trace_json)
        np.testing.assert_array_equal(_run(replayed, args, depth), _run(seed.mod, args, depth))

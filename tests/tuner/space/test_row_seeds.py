"""Row-wise seeds of row-reduction kernels (softmax): where they apply, that they compute the same, that they replay."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te, topi

from measure.tvmapi import apply_trace, make_target
from tuner.space.gemm_seeds import vector_lanes
from tuner.space.row_seeds import row_seeds
from tuner.space.space import ScheduleSpace

TARGET = make_target({"kind": "llvm", "num-cores": 2})


def _softmax(shape):
    """TVM's legalized softmax over the last axis of a float32 tensor (topi, four blocks)."""
    x = te.placeholder(shape, name="x")
    return te.create_prim_func([x, topi.nn.softmax(x, axis=-1)])


def _run(mod: tvm.IRModule, x: np.ndarray) -> np.ndarray:
    out = tvm.runtime.tensor(np.zeros(x.shape, "float32"))
    tvm.compile(mod, TARGET)["main"](tvm.runtime.tensor(x), out)
    return out.numpy()


@pytest.mark.parametrize("shape", [(2, 4, 3, 64), (8, 48)])
def test_softmax_seeds_compute_the_softmax(shape):
    func = _softmax(shape)
    lanes = vector_lanes(TARGET)
    seeds = row_seeds(func, TARGET)
    # reductions vectorised only when the row is a multiple of the vector width
    assert len(seeds) == (2 if shape[-1] % lanes == 0 and shape[-1] > lanes else 1)
    x = np.random.default_rng(0).standard_normal(shape).astype("float32") * 4
    want = np.exp(x - x.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    for sch in seeds:
        script = sch.mod.script()
        assert "T.parallel" in script and "T.vectorized" in script
        np.testing.assert_allclose(_run(sch.mod, x), want, rtol=1e-5, atol=1e-6)
    if len(seeds) == 2:
        assert "_rf" in seeds[1].mod.script()  # the row reductions go through a vector of partial results


def test_kernels_of_another_form_get_none():
    a, b = te.placeholder((16, 32), name="a"), te.placeholder((32, 16), name="b")
    r = te.reduce_axis((0, 32), name="r")
    gemm = te.create_prim_func([a, b, te.compute((16, 16), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r))])
    elementwise = te.create_prim_func([a, te.compute((16, 32), lambda i, j: a[i, j] * 2.0)])
    row_max = te.create_prim_func([a, topi.max(a, axis=-1)])  # one block: nothing to put under a row loop
    doubled = te.compute((16, 32), lambda i, j: a[i, j] * 2.0, name="doubled")
    max_out = te.create_prim_func([a, topi.max(doubled, axis=-1)])  # two blocks, but a reduction is the output
    for func in (gemm, elementwise, row_max, max_out):
        assert row_seeds(func, TARGET) == []
    assert row_seeds(_softmax((4, 64)), make_target({"kind": "c"})) == []


def test_the_space_seeds_a_softmax_and_its_traces_replay():
    func = _softmax((4, 8, 64))
    space = ScheduleSpace(func, "softmax-test", TARGET)
    seeds = space.seeds()
    assert len(seeds) == 2
    x = np.random.default_rng(1).standard_normal((4, 8, 64)).astype("float32")
    for seed in seeds:
        replayed = apply_trace(func.with_attr("global_symbol", "main"), seed.record.trace_json)
        np.testing.assert_array_equal(_run(replayed, x), _run(seed.mod, x))

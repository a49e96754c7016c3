"""The fused projection + rotary embedding kernel: it computes what transformers computes,
and its register-blocked seeds (the rotation after the GEMM) compute the same."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te

from extract.ops.kernels import rotary_dense_te
from measure.tvmapi import make_target
from tuner.space.gemm_seeds import gemm_seeds

TARGET = make_target({"kind": "llvm", "num-cores": 2})
SEQ, K, HEADS, DIM, BLOCK = 6, 32, 2, 16, 16
EPS = 1e-6


def _reference(x, w, cos, sin, g=None) -> np.ndarray:
    """transformers' path in float64: project, split heads, (norm), move heads first, rotate."""
    y = (x.astype("float64").reshape(-1, K) @ w.astype("float64").T).reshape(1, SEQ, HEADS, DIM)
    if g is not None:
        y = y / np.sqrt((y * y).mean(-1, keepdims=True) + EPS) * g
    y = y.transpose(0, 2, 1, 3)
    turned = np.concatenate([-y[..., DIM // 2:], y[..., :DIM // 2]], axis=-1)
    return y * cos + turned * sin


@pytest.mark.parametrize("norm", [False, True])
@pytest.mark.parametrize("x_dims", [(SEQ, K), (1, SEQ, K)])
def test_rotary_kernel_and_its_seeds_match_the_reference(norm, x_dims):
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal(x_dims).astype("float32")
    w_np = rng.standard_normal((HEADS * DIM, K)).astype("float32")
    wp_np = w_np.reshape(-1, BLOCK, K).transpose(0, 2, 1).copy()  # [N / b, K, b], as lowering packs it
    angles = rng.uniform(0, 6, (SEQ, DIM // 2))
    cos_np = np.cos(np.concatenate([angles, angles], -1)).astype("float32")[None, None]
    sin_np = np.sin(np.concatenate([angles, angles], -1)).astype("float32")[None, None]
    g_np = rng.uniform(0.5, 1.5, DIM).astype("float32")

    x = te.placeholder(x_dims, name="x")
    wp = te.placeholder(wp_np.shape, name="wp")
    cos = te.placeholder(cos_np.shape, name="cos")
    sin = te.placeholder(sin_np.shape, name="sin")
    g = te.placeholder((DIM,), name="g")
    heads = (1, SEQ, HEADS, DIM)
    out = rotary_dense_te(x, wp, cos, sin, heads, g, EPS) if norm else rotary_dense_te(x, wp, cos, sin, heads)
    params = [x, wp, g, cos, sin] if norm else [x, wp, cos, sin]
    arrays = [x_np, wp_np, g_np, cos_np, sin_np] if norm else [x_np, wp_np, cos_np, sin_np]
    func = te.create_prim_func([*params, out])
    want = _reference(x_np, w_np, cos_np, sin_np, g_np if norm else None)

    def run(mod):
        result = tvm.runtime.tensor(np.zeros((1, HEADS, SEQ, DIM), "float32"))
        tvm.compile(mod, TARGET)["main"](*(tvm.runtime.tensor(a) for a in arrays), result)
        return result.numpy()

    np.testing.assert_allclose(run(tvm.IRModule({"main": func.with_attr("global_symbol", "main")})), want,
                               rtol=1e-5, atol=1e-5)
    seeds = gemm_seeds(func, TARGET, tiles=[(2, 1, 0), (2, 1, 8)])
    assert len(seeds) == 2  # the rotation reads past each tile: it runs after the GEMM
    for sch in seeds:
        script = sch.mod.script()
        assert "T.parallel" in script and "T.vectorized" in script
        np.testing.assert_allclose(run(sch.mod), want, rtol=1e-5, atol=1e-5)

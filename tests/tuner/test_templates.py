"""Register-blocked GEMM seeds: where they apply, that they compute the same, and that they replay."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te

from extract.lowering import dense_packed_te
from measure.tvmapi import apply_trace, make_target
from tuner.space import ScheduleSpace
from tuner.templates import SEED_TILES, gemm_seeds, vector_lanes

TARGET = make_target({"kind": "llvm", "num-cores": 2})


def _run(mod, arrays: list[np.ndarray], out_shape) -> np.ndarray:
    out = tvm.runtime.tensor(np.zeros(out_shape, "float32"))
    tvm.compile(mod, TARGET)["main"](*[tvm.runtime.tensor(a) for a in arrays], out)
    return out.numpy()


def _matmul_kn(m, k, n, epilogue: bool):
    """``x [M, K] @ w [K, N]`` (the weight read along N), optionally plus a residual ``r [M, N]``."""
    x, w = te.placeholder((m, k), name="x"), te.placeholder((k, n), name="w")
    r = te.reduce_axis((0, k), name="r")
    y = te.compute((m, n), lambda i, j: te.sum(x[i, r] * w[r, j], axis=r), name="matmul")
    if not epilogue:
        return te.create_prim_func([x, w, y])
    res = te.placeholder((m, n), name="res")
    return te.create_prim_func([x, w, res, te.compute((m, n), lambda i, j: y[i, j] + res[i, j], name="add")])


@pytest.mark.parametrize("m,k,n", [(8, 64, 32), (13, 512, 48)])
def test_seeds_of_a_packed_gemm_compute_the_product(m, k, n):
    """Both micro-kernels, with M not a multiple of the tile rows and K above and below the k block."""
    x, wp = te.placeholder((m, k), name="x"), te.placeholder((n // 16, k, 16), name="wp")
    func = te.create_prim_func([x, wp, dense_packed_te(x, wp)])
    seeds = gemm_seeds(func, TARGET)
    assert len(seeds) == len(SEED_TILES)
    rng = np.random.default_rng(0)
    xa, w = rng.standard_normal((m, k)).astype("float32"), rng.standard_normal((n, k)).astype("float32")
    packed = np.ascontiguousarray(w.reshape(n // 16, 16, k).transpose(0, 2, 1))
    for sch in seeds:
        np.testing.assert_allclose(_run(sch.mod, [xa, packed], (m, n)), xa @ w.T, rtol=1e-4, atol=1e-3)


def test_seeds_fuse_an_epilogue_and_replay_from_their_trace():
    func = _matmul_kn(12, 300, 32, epilogue=True)
    seeds = gemm_seeds(func, TARGET)
    assert len(seeds) == len(SEED_TILES)
    rng = np.random.default_rng(1)
    x, w, res = (rng.standard_normal(s).astype("float32") for s in [(12, 300), (300, 32), (12, 32)])
    for sch in seeds:
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
        outermost = {sch.get(sch.get_loops(b)[0]).loop_var.name for b in blocks}
        assert len(outermost) == 1, "the epilogue runs inside the GEMM's parallel panel loop"
        np.testing.assert_allclose(_run(sch.mod, [x, w, res], (12, 32)), x @ w + res, rtol=1e-4, atol=1e-3)
    space = ScheduleSpace(func, "e" * 64, TARGET)
    for cand in space.seeds():
        assert apply_trace(space.mod["main"], cand.record.trace_json).script() == cand.mod.script()


def test_no_seed_where_the_weight_is_read_across_its_rows():
    """``x @ w^T`` with ``w [N, K]`` reads N columns apart: a vectorised tile would gather, so no seed."""
    x, w = te.placeholder((8, 64), name="x"), te.placeholder((32, 64), name="w")
    r = te.reduce_axis((0, 64), name="r")
    y = te.compute((8, 32), lambda i, j: te.sum(x[i, r] * w[j, r], axis=r), name="dense")
    assert gemm_seeds(te.create_prim_func([x, w, y]), TARGET) == []
    add = te.compute((8, 64), lambda i, j: x[i, j] + 1.0, name="add")
    assert gemm_seeds(te.create_prim_func([x, add]), TARGET) == [], "no reduction"
    assert gemm_seeds(_matmul_kn(8, 64, 32, False), make_target({"kind": "cuda"})) == [], "CPU only"
    assert gemm_seeds(_matmul_kn(1, 64, 32, False), TARGET) == [], "a GEMV has no register tile"
    assert len(gemm_seeds(_matmul_kn(5, 64, 32, False), TARGET)) == 1, "only the 4-row tile fits 5 rows"
    assert gemm_seeds(_matmul_kn(8, 64, 2 * vector_lanes(TARGET) - 1, False), TARGET) == [], "narrower than a tile"


def test_vector_lanes_follow_the_target_features():
    assert vector_lanes(make_target({"kind": "llvm", "mcpu": "skylake-avx512"})) == 16
    assert vector_lanes(make_target({"kind": "llvm", "mcpu": "haswell"})) == 8

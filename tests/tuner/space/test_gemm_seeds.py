"""Register-blocked GEMM seeds: where they apply, that they compute the same, and that they replay."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te

from extract.ops.kernels import dense_packed_te
from measure.tvmapi import apply_trace, make_target, tirx
from tuner.space.gemm_seeds import (
    LEADING_SEEDS,
    SKINNY_VECTORS,
    gemm_seeds,
    seed_tiles,
    vector_lanes,
    vector_registers,
)
from tuner.space.space import ScheduleSpace

TARGET = make_target({"kind": "llvm", "num-cores": 2})


def _run(mod, arrays: list[np.ndarray], out_shape) -> np.ndarray:
    out = tvm.runtime.tensor(np.zeros(out_shape, "float32"))
    tvm.compile(mod, TARGET)["main"](*[tvm.runtime.tensor(a) for a in arrays], out)
    return out.numpy()


def _pack(w: np.ndarray) -> np.ndarray:
    """``W [N, K]`` in the packed layout ``[N / 16, K, 16]`` that ``dense_packed_te`` reads."""
    n, k = w.shape
    return np.ascontiguousarray(w.reshape(n // 16, 16, k).transpose(0, 2, 1))


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
    """Blocked and unblocked micro-kernels, with M not a multiple of the tile rows and K above and
    below the k block."""
    x, wp = te.placeholder((m, k), name="x"), te.placeholder((n // 16, k, 16), name="wp")
    func = te.create_prim_func([x, wp, dense_packed_te(x, wp)])
    lanes = vector_lanes(TARGET)
    tiles = [(6, 2, 256), (4, 2, 0), (4, 1, 128)]
    seeds = gemm_seeds(func, TARGET, tiles=tiles)
    assert len(seeds) == len([t for t in tiles if t[1] * lanes <= n])
    rng = np.random.default_rng(0)
    xa, w = rng.standard_normal((m, k)).astype("float32"), rng.standard_normal((n, k)).astype("float32")
    packed = _pack(w)
    for sch in seeds:
        np.testing.assert_allclose(_run(sch.mod, [xa, packed], (m, n)), xa @ w.T, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("m", [1, 3])
def test_a_skinny_gemm_gets_tiles_of_all_its_rows_that_compute_the_product(m):
    """A decode GEMV (and a 3-row output): every tile of the default grid, blocked or not, is exact."""
    k, n = 300, 64
    x, wp = te.placeholder((m, k), name="x"), te.placeholder((n // 16, k, 16), name="wp")
    func = te.create_prim_func([x, wp, dense_packed_te(x, wp)])
    tiles = seed_tiles(m, n, k, vector_lanes(TARGET), vector_registers(TARGET))
    assert tiles and {mr for mr, _, _ in tiles} == {m} and {kc for _, _, kc in tiles} >= {0, 128, 256}
    seeds = gemm_seeds(func, TARGET)
    assert len(seeds) == len(tiles)
    rng = np.random.default_rng(2)
    xa, w = rng.standard_normal((m, k)).astype("float32"), rng.standard_normal((n, k)).astype("float32")
    packed = _pack(w)
    for sch in seeds:
        np.testing.assert_allclose(_run(sch.mod, [xa, packed], (m, n)), xa @ w.T, rtol=1e-4, atol=1e-3)


@pytest.mark.slow
def test_seeds_fuse_an_epilogue_and_replay_from_their_trace():
    func = _matmul_kn(12, 300, 32, epilogue=True)
    seeds = gemm_seeds(func, TARGET, tiles=[(6, 2, 256), (4, 2, 0)])
    assert len(seeds) == (2 if 2 * vector_lanes(TARGET) <= 32 else 0)
    rng = np.random.default_rng(1)
    x, w, res = (rng.standard_normal(s).astype("float32") for s in [(12, 300), (300, 32), (12, 32)])
    for sch in seeds:
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
        outermost = {sch.get(sch.get_loops(b)[0]).loop_var.name for b in blocks}
        assert len(outermost) == 1, "the epilogue runs inside the GEMM's parallel panel loop"
        np.testing.assert_allclose(_run(sch.mod, [x, w, res], (12, 32)), x @ w + res, rtol=1e-4, atol=1e-3)
    space = ScheduleSpace(func, "e" * 64, TARGET)
    assert len(space.seeds()) == len(seed_tiles(12, 32, 300, vector_lanes(TARGET), vector_registers(TARGET))) > 2
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
    five_rows = seed_tiles(5, 32, 64, vector_lanes(TARGET), vector_registers(TARGET))
    assert five_rows and {mr for mr, _, _ in five_rows} == {4}, "only 4-row tiles fit 5 rows"
    assert len(gemm_seeds(_matmul_kn(5, 64, 32, False), TARGET)) == len(five_rows)
    assert gemm_seeds(_matmul_kn(8, 64, vector_lanes(TARGET) - 1, False), TARGET) == [], "narrower than a tile"


def test_vector_lanes_follow_the_target_features():
    assert vector_lanes(make_target({"kind": "llvm", "mcpu": "skylake-avx512"})) == 16
    assert vector_lanes(make_target({"kind": "llvm", "mcpu": "haswell"})) == 8
    assert vector_registers(make_target({"kind": "llvm", "mcpu": "skylake-avx512"})) == 32
    assert vector_registers(make_target({"kind": "llvm", "mcpu": "haswell"})) == 16


@pytest.mark.parametrize("lanes,registers", [(16, 32), (8, 16)])
def test_seed_tiles_fit_the_registers_and_lead_with_one_blocked_and_one_unblocked(lanes, registers):
    rows, cols, depth = 128, 1024, 2048
    tiles = seed_tiles(rows, cols, depth, lanes, registers)
    assert len(set(tiles)) == len(tiles) > LEADING_SEEDS
    for mr, v, kc in tiles:
        assert mr * v + v + 1 <= registers and mr <= rows and v * lanes <= cols and kc < depth
    first, second = tiles[:LEADING_SEEDS]
    assert first[2] > 0 and second[2] == 0, "a k-blocked tile, then one that keeps its sums in a local buffer"
    for mr, v, _ in (first, second):
        assert cols % (v * lanes) == 0 and mr * v <= 3 * registers // 4
    ragged = [i for i, (_, v, _) in enumerate(tiles) if cols % (v * lanes)]
    assert ragged and min(ragged) > max(i for i, (_, v, _) in enumerate(tiles) if not cols % (v * lanes)), \
        "tiles that leave a ragged column edge come last"
    assert seed_tiles(rows, cols, 128, lanes, registers)[1][2] == 0
    assert all(kc == 0 for _, _, kc in seed_tiles(rows, cols, 100, lanes, registers)), "no k block above K"
    gemv = seed_tiles(1, cols, depth, lanes, registers)
    assert {(mr, v) for mr, v, _ in gemv} == {(1, v) for v in SKINNY_VECTORS}, "a GEMV: one row, wider tiles"
    assert gemv[0][1] == gemv[1][1] == max(SKINNY_VECTORS) and gemv[0][2] > 0 == gemv[1][2]
    three = seed_tiles(3, cols, depth, lanes, registers)
    assert three and all(mr == 3 and 3 * v + v + 1 <= registers for mr, v, _ in three), "weights held for 3 rows"


def test_seeds_of_scores_on_keys_packed_in_the_kernel_compute_them():
    """The ``key_layout`` kernel packs the keys, then runs a packed GEMM per head: the seeds
    tile the GEMM and spread the packing loop over the cores."""
    from tuner.cost_model.node_prices import node_kernel

    q_shape, k_shape, out_shape = (1, 4, 8, 16), (1, 2, 32, 16), (1, 4, 8, 32)
    kernel = node_kernel("gqa_scores_packed", out_shape, "float32", [q_shape, k_shape])
    seeds = gemm_seeds(kernel.func, TARGET)
    assert seeds
    rng = np.random.default_rng(3)
    q, k = rng.standard_normal(q_shape).astype("float32"), rng.standard_normal(k_shape).astype("float32")
    for sch in seeds[:LEADING_SEEDS]:
        pack_loops = sch.get_loops(sch.get_sblock("keys_packed"))
        assert int(sch.get(pack_loops[0]).kind) == int(tirx.ForKind.PARALLEL)
        np.testing.assert_allclose(_run(sch.mod, [q, k], out_shape), q @ np.repeat(k, 2, axis=1).transpose(0, 1, 3, 2),
                                   rtol=1e-4, atol=1e-4)

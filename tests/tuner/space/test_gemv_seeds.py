"""Split-k GEMV seeds: where they apply, that they compute the same, and that they lead the search."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te

from extract.ops.kernels import dense_packed_te
from measure.tvmapi import apply_trace, make_target
from tuner.space.gemm_seeds import LEADING_SEEDS, vector_lanes
from tuner.space.gemv_seeds import SPLIT_K_PARTS, split_k_seeds
from tuner.space.space import ScheduleSpace

TARGET = make_target({"kind": "llvm", "num-cores": 2})


def _gemv(batch: int | None, m: int, k: int, n: int, epilogue: bool):
    """``x [(B,) M, K] @ w [(B,) K, N]``, optionally plus a residual of the output's shape."""
    lead = () if batch is None else (batch,)
    x, w = te.placeholder((*lead, m, k), name="x"), te.placeholder((*lead, k, n), name="w")
    r = te.reduce_axis((0, k), name="r")
    if batch is None:
        y = te.compute((m, n), lambda i, j: te.sum(x[i, r] * w[r, j], axis=r), name="matmul")
    else:
        y = te.compute((batch, m, n), lambda b, i, j: te.sum(x[b, i, r] * w[b, r, j], axis=r), name="matmul")
    if not epilogue:
        return te.create_prim_func([x, w, y])
    res = te.placeholder(y.shape, name="res")
    return te.create_prim_func([x, w, res, te.compute(y.shape, lambda *i: y(*i) + res(*i), name="add")])


def _run(mod, arrays: list[np.ndarray], out_shape) -> np.ndarray:
    out = tvm.runtime.tensor(np.zeros(out_shape, "float32"))
    tvm.compile(mod, TARGET)["main"](*[tvm.runtime.tensor(a) for a in arrays], out)
    return out.numpy()


@pytest.mark.parametrize("batch,m,k", [(None, 1, 512), (None, 3, 300), (4, 1, 256)])
def test_split_k_seeds_compute_the_product_with_its_epilogue(batch, m, k):
    """One row and three, ``k`` a multiple of the parts and not, a batched GEMV (heads outer)."""
    n = 2 * vector_lanes(TARGET)
    func = _gemv(batch, m, k, n, epilogue=True)
    seeds = split_k_seeds(func, TARGET)
    assert len(seeds) == len(SPLIT_K_PARTS)
    lead = () if batch is None else (batch,)
    rng = np.random.default_rng(3)
    x, w, res = (rng.standard_normal(s).astype("float32") for s in [(*lead, m, k), (*lead, k, n), (*lead, m, n)])
    for sch in seeds:
        assert any("_rf" in b.name_hint for b in _blocks(sch)), "k is factored into partial sums"
        np.testing.assert_allclose(_run(sch.mod, [x, w, res], (*lead, m, n)), x @ w + res, rtol=1e-4, atol=1e-3)


def _blocks(sch):
    return [sch.get(b) for b in sch.get_child_blocks(sch.get_sblock("root"))]


def test_split_k_seeds_lead_a_gemv_search_and_replay_from_their_trace():
    func = _gemv(None, 1, 512, 64, epilogue=False)
    space = ScheduleSpace(func, "g" * 64, TARGET)
    seeds = space.seeds()
    assert len(seeds) > len(SPLIT_K_PARTS) >= LEADING_SEEDS, "the register tiles follow the split-k seeds"
    for cand in seeds[:LEADING_SEEDS]:
        assert "rfactor" in cand.record.trace_json.lower()
    for cand in seeds:
        assert apply_trace(space.mod["main"], cand.record.trace_json).script() == cand.mod.script()


def test_no_split_k_seed_outside_a_gemv_on_a_row_major_weight():
    lanes = vector_lanes(TARGET)
    assert split_k_seeds(_gemv(None, 4, 512, 2 * lanes, False), TARGET) == [], "four rows get register tiles"
    assert split_k_seeds(_gemv(None, 1, 512, 2 * lanes + 1, False), TARGET) == [], "N not whole vectors"
    assert len(split_k_seeds(_gemv(None, 1, 8 * lanes, 2 * lanes, False), TARGET)) == 1, "too few rows for 16 parts"
    assert split_k_seeds(_gemv(None, 1, 512, 2 * lanes, False), make_target({"kind": "cuda"})) == [], "CPU only"
    x, wp = te.placeholder((1, 512), name="x"), te.placeholder((2, 512, 16), name="wp")
    packed = te.create_prim_func([x, wp, dense_packed_te(x, wp)])
    assert split_k_seeds(packed, TARGET) == [], "a packed weight's k runs are contiguous already"
    x, w = te.placeholder((1, 512), name="x"), te.placeholder((32, 512), name="w")
    r = te.reduce_axis((0, 512), name="r")
    across = te.compute((1, 32), lambda i, j: te.sum(x[i, r] * w[j, r], axis=r), name="dense")
    assert split_k_seeds(te.create_prim_func([x, w, across]), TARGET) == [], "w [N, K] is not read along n"

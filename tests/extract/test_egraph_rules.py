"""Rewrite rules one at a time on tiny e-graphs: each fires where valid and only there."""

from __future__ import annotations

import pytest
from egglog import EGraph, String, Vec, eq, i64, run, set_

from extract.lang import (
    Tensor,
    add,
    concat,
    dense,
    dense_add,
    dtype,
    matmul,
    merged_dense,
    multiply,
    order,
    permute_dims,
    reshape,
    shape,
    sigmoid,
    silu,
    silu_mul_dense,
)
from extract.rules import ANALYSIS, FAMILIES, RULESETS
from extract.translate import shape_vec

F32, F16 = "float32", "float16"
_weights = iter(range(1_000_000))


def leaf(
    name: str, dims: tuple[int, ...], dt: str = F32, weight: bool = False
) -> tuple[Tensor, list]:
    """A parameter with its shape and dtype facts (and an order when it is a weight)."""
    t = Tensor.var(name)
    facts = [set_(shape(t)).to(shape_vec(dims)), set_(dtype(t)).to(String(dt))]
    if weight:
        facts.append(set_(order(t)).to(i64(next(_weights))))
    return t, facts


def with_facts(t: Tensor, dims: tuple[int, ...], dt: str = F32) -> list:
    return [set_(shape(t)).to(shape_vec(dims)), set_(dtype(t)).to(String(dt))]


def egraph(roots: list[Tensor], *fact_lists: list) -> EGraph:
    eg = EGraph()
    eg.register(*roots, *[f for facts in fact_lists for f in facts])
    return eg


def saturate_family(eg: EGraph, family: str) -> None:
    for _ in range(6):
        eg.run(ANALYSIS.saturate())
        eg.run(run(RULESETS[family]))


def x_and_weights(dts=(F32, F32, F32), rows=(64, 32, 32), k=64, other_x=False, weights=True):
    x, fx = leaf("x", (8, k))
    x2, fx2 = leaf("x2", (8, k))
    ws, facts = [], fx + fx2
    for i, (dt, n) in enumerate(zip(dts, rows, strict=True)):
        w, fw = leaf(f"w{i}", (n, k), dt, weight=weights)
        ws.append(w)
        facts += fw
    xs = [x2 if other_x and i == len(ws) - 1 else x for i in range(len(ws))]
    denses = [dense(xi, w) for xi, w in zip(xs, ws, strict=True)]
    for d, n in zip(denses, rows, strict=True):
        facts += with_facts(d, (8, n))  # a product has the dtype of x
    return x, ws, denses, facts


# -- case builders: each returns (egraph, the constructor the rewrite adds) ------------


def fold(w_axes=(1, 0), x_dt=F32):
    x, fx = leaf("x", (8, 64), x_dt)
    w, fw = leaf("w", (32, 64), weight=True)
    m = matmul(x, permute_dims(w, shape_vec(w_axes)))
    return egraph([m], fx, fw, with_facts(m, (8, 32))), dense


def merge(n=3, **kw):
    kw.setdefault("dts", (F32,) * n)
    kw.setdefault("rows", (64, 32, 32)[:n])
    _, _, denses, facts = x_and_weights(**kw)
    return egraph(denses, facts), concat


def silu_case(same=True, swapped=False):
    a, fa = leaf("a", (8, 128))
    b, fb = leaf("b", (8, 128))
    s = sigmoid(a if same else b)
    m = multiply(s, a) if swapped else multiply(a, s)
    return egraph([m], fa, fb), silu


def reshape_case(same_shapes=True):
    a, fa = leaf("a", (8, 128))
    b, fb = leaf("b", (8, 128) if same_shapes else (4, 256))
    s = shape_vec((1, 8, 128))
    m = multiply(reshape(a, s), reshape(b, s))
    return egraph([m], fa, fb), multiply


def silu_mul(other_x=False, swapped=False):
    _, _, (g, u), facts = x_and_weights(dts=(F32, F32), rows=(128, 128), other_x=other_x)
    m = multiply(u, silu(g)) if swapped else multiply(silu(g), u)
    return egraph([m], facts), silu_mul_dense


def residual(r_dims=(8, 64), swapped=False, through_reshape=False):
    _, _, (d,), facts = x_and_weights(dts=(F32,), rows=(64,))
    r, fr = leaf("r", r_dims)
    prod = reshape(d, shape_vec((1, 8, 64))) if through_reshape else d
    total = add(prod, r) if swapped else add(r, prod)
    return egraph([total], facts, fr), dense_add


CASES = [
    # (family, case, builder, whether the rewrite must appear)
    ("transpose_fold", "x @ permute_dims(W, [1, 0])", lambda: fold(), True),
    ("transpose_fold", "axes [0, 1] is no transpose", lambda: fold(w_axes=(0, 1)), False),
    ("transpose_fold", "x and W of different dtypes", lambda: fold(x_dt=F16), False),
    ("merge_qkv", "three GEMMs on one x", lambda: merge(3), True),
    ("merge_qkv", "one GEMM on another x", lambda: merge(3, other_x=True), False),
    ("merge_qkv", "one weight of another dtype", lambda: merge(3, dts=(F32, F32, F16)), False),
    ("merge_qkv", "activations, not weights", lambda: merge(3, weights=False), False),
    ("merge_pair", "two GEMMs on one x", lambda: merge(2, rows=(128, 128)), True),
    ("merge_pair", "two GEMMs on different x", lambda: merge(2, other_x=True), False),
    ("merge_pair", "different dtypes", lambda: merge(2, dts=(F32, F16)), False),
    ("silu", "a * sigmoid(a)", lambda: silu_case(), True),
    ("silu", "sigmoid(a) * a", lambda: silu_case(swapped=True), True),
    ("silu", "a * sigmoid(b)", lambda: silu_case(same=False), False),
    ("epilogue_silu_mul", "silu(gate) * up", lambda: silu_mul(), True),
    ("epilogue_silu_mul", "up * silu(gate)", lambda: silu_mul(swapped=True), True),
    ("epilogue_silu_mul", "gate and up on different x", lambda: silu_mul(other_x=True), False),
    ("epilogue_add", "r + x @ W^T", lambda: residual(), True),
    ("epilogue_add", "x @ W^T + r", lambda: residual(swapped=True), True),
    (
        "epilogue_add",
        "r + reshape(x @ W^T)",
        lambda: residual(r_dims=(1, 8, 64), through_reshape=True),
        True,
    ),
    (
        "epilogue_add",
        "reshape(x @ W^T) + r",
        lambda: residual((1, 8, 64), swapped=True, through_reshape=True),
        True,
    ),
    ("epilogue_add", "r broadcasts", lambda: residual(r_dims=(64,)), False),
    (
        "epilogue_add",
        "r broadcasts through reshape",
        lambda: residual((64,), through_reshape=True),
        False,
    ),
]


@pytest.mark.parametrize(
    ("family", "case", "build", "fires"), CASES, ids=[f"{f}: {c}" for f, c, _, _ in CASES]
)
def test_rule_fires_only_where_valid(family, case, build, fires):
    eg, constructor = build()
    before = eg.function_size(constructor)
    saturate_family(eg, family)
    assert (eg.function_size(constructor) > before) == fires


def test_reshape_motion_needs_equal_shapes():
    for same, grows in ((True, True), (False, False)):
        eg, constructor = reshape_case(same_shapes=same)
        before = eg.function_size(constructor)
        saturate_family(eg, "reshape")
        assert (eg.function_size(constructor) > before) == grows


def test_merge_unions_each_gemm_with_its_part():
    _, (wq, wk, wv), (q, k, v), facts = x_and_weights()
    eg = egraph([q, k, v], facts)
    saturate_family(eg, "merge_qkv")
    x = Tensor.var("x")
    wcat = concat(Vec[Tensor](wq, wk, wv))
    eg.check(
        eq(q).to(merged_dense(x, wcat, i64(0), i64(64))),
        eq(k).to(merged_dense(x, wcat, i64(64), i64(96))),
        eq(v).to(merged_dense(x, wcat, i64(96), i64(128))),
        eq(shape(wcat)).to(shape_vec((128, 64))),
    )
    eg.run(ANALYSIS.saturate())
    eg.check(eq(shape(merged_dense(x, wcat, i64(64), i64(96)))).to(shape_vec((8, 32))))


def test_residual_through_reshape_keeps_shapes():
    eg, _ = residual(r_dims=(1, 8, 64), through_reshape=True)
    saturate_family(eg, "epilogue_add")
    r = Tensor.var("r")
    fused = dense_add(Tensor.var("x"), Tensor.var("w0"), reshape(r, shape_vec((8, 64))))
    eg.check(eq(shape(fused)).to(shape_vec((8, 64))))
    eg.check(
        eq(add(r, reshape(dense(Tensor.var("x"), Tensor.var("w0")), shape_vec((1, 8, 64))))).to(
            reshape(fused, shape_vec((1, 8, 64)))
        )
    )


def test_every_family_has_cases():
    assert {f for f, *_ in CASES} | {"reshape"} == set(FAMILIES)

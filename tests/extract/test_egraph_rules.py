"""Rewrite rules one at a time on tiny e-graphs: each fires where valid and only there."""

from __future__ import annotations

import pytest
from egglog import EGraph, String, Vec, eq, i64, run, set_

from extract.lang import (
    Tensor,
    add,
    attention,
    concat,
    dense,
    dense_add,
    dense_bias,
    dense_packed,
    dtype,
    fast_attention,
    fast_silu,
    fast_softmax_last,
    gqa_context,
    gqa_scores,
    gqa_scores_packed,
    matmul,
    mean_last,
    merged_dense,
    merged_dense_bias,
    merged_dense_packed,
    multiply,
    order,
    permute_dims,
    repeat_heads,
    reshape,
    rms_norm,
    rms_norm_dense,
    rotary,
    rotary_dense,
    rotary_norm_dense,
    rotate_half,
    rsqrt,
    shape,
    sigmoid,
    silu,
    silu_mul_dense,
    softmax_last,
    square,
)
from extract.rules import ANALYSIS, FAMILIES, PACK_BLOCK, RULESETS
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


def fast_exp_case(op="softmax", dt=F32):
    a, fa = leaf("a", (2, 8, 128), dt)
    node = softmax_last(a) if op == "softmax" else silu(a)
    return egraph([node], fa), fast_softmax_last if op == "softmax" else fast_silu


def fast_attention_case(dt=F32):
    q, fq = leaf("q", (1, 4, SEQ, DEPTH), dt)
    k, fk = leaf("k", (1, 2, KEYS, DEPTH), dt)
    c, fc = leaf("c", (), dt)
    m, fm = leaf("m", (1, 1, SEQ, KEYS), dt)
    return egraph([attention(q, k, k, c, m)], fq, fk, fc, fm), fast_attention


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


def bias_case(b_dims=(32,), b_dt=F32, swapped=False):
    _, _, (d,), facts = x_and_weights(dts=(F32,), rows=(32,))
    bias, fb = leaf("b", b_dims, b_dt)
    total = add(d, bias) if swapped else add(bias, d)
    return egraph([total], facts, fb), dense_bias


def merge_bias(n=3, biased=(True, True, True)):
    rows = (64, 32, 32)[:n]
    x, _, denses, facts = x_and_weights(dts=(F32,) * n, rows=rows)
    outs = []
    for i, (d, nrows) in enumerate(zip(denses, rows, strict=True)):
        if biased[i]:
            bias, fb = leaf(f"b{i}", (nrows,), weight=True)
            facts += fb
            d = dense_bias(x, Tensor.var(f"w{i}"), bias)
            facts += with_facts(d, (8, nrows))
        outs.append(d)
    return egraph(outs, facts), merged_dense_bias


def norm_term(x, g, eps, swapped=False):
    stat = add(mean_last(square(x)), eps)
    normed = multiply(x, rsqrt(stat))
    return multiply(normed, g) if swapped else multiply(g, normed)


def norm_case(g_dims=(64,), eps_dims=(), other_x=False, swapped=False, dt=F32):
    x, fx = leaf("x", (1, 8, 64))
    x2, fx2 = leaf("x2", (1, 8, 64))
    g, fg = leaf("g", g_dims, dt, weight=True)
    eps, fe = leaf("eps", eps_dims)
    stat = add(mean_last(square(x2 if other_x else x)), eps)
    normed = multiply(x, rsqrt(stat))
    root = multiply(normed, g) if swapped else multiply(g, normed)
    return egraph([root], fx, fx2, fg, fe), rms_norm


def norm_facts(dims=(8, 64)):
    x, fx = leaf("x", dims)
    g, fg = leaf("g", (dims[-1],), weight=True)
    eps, fe = leaf("eps", ())
    return x, g, eps, fx + fg + fe


def prologue_case(normed=True):
    x, g, eps, facts = norm_facts()
    w, fw = leaf("w", (32, 64), weight=True)
    operand = norm_term(x, g, eps) if normed else multiply(x, x)
    return egraph([dense(operand, w)], facts, fw), rms_norm_dense


def prologue_through_reshape(keep_last=True):
    x, g, eps, facts = norm_facts((1, 8, 64))
    w, fw = leaf("w", (32, 64), weight=True)
    new_shape = (8, 64) if keep_last else (16, 32)
    operand = reshape(norm_term(x, g, eps), shape_vec(new_shape))
    if not keep_last:
        w, fw = leaf("w", (32, 32), weight=True)
    eg = egraph([dense(operand, w)], facts, fw)
    for _ in range(4):
        for family in ("rms_norm", "prologue_rms_norm"):
            eg.run(ANALYSIS.saturate())
            eg.run(run(RULESETS[family]))
    return eg, rms_norm_dense


SEQ, KEYS, DEPTH = 3, 5, 16


def gqa_case(
    kind="scores", heads=4, kv_heads=2, depth=DEPTH, batch=1, dt=F32, axes=(0, 1, 3, 2),
    flat=False, q_rows=None, inner=None,
):
    """Grouped-query attention's product with K (``kind="scores"``) or V repeated twice.

    ``flat`` goes through the frontend's reshapes to ``[B * H, ., .]``; ``q_rows``
    replaces the rows of the first operand's reshape (``(B * H, S)`` when valid);
    ``inner`` its last dimension (``D`` for scores, ``L`` for the context when valid).
    """
    inner = inner or (depth if kind == "scores" else KEYS)
    a, fa = leaf("a", (batch, heads, SEQ, inner), dt)
    kv, fkv = leaf("kv", (1, kv_heads, KEYS, depth))
    b = repeat_heads(kv, i64(2))
    if kind == "scores":
        b = permute_dims(b, shape_vec(axes))
    if flat:
        rows = q_rows or (batch * heads, SEQ)
        a = reshape(a, shape_vec((*rows, inner)))
        b_dims = (depth, KEYS) if kind == "scores" else (KEYS, depth)
        b = reshape(b, shape_vec((batch * heads, *b_dims)))
    return egraph([matmul(a, b)], fa, fkv), gqa_scores if kind == "scores" else gqa_context


def attention_case(scale_dims=(), mask_dims=(1, 1, SEQ, KEYS), mask_dt=F32, swapped=False,
                   softmax=True, dt=F32, const_scale=True):
    """``gqa_context(softmax_last(gqa_scores(q, k) * c + m), v)`` with the facts translation
    gives: ``c`` a constant (a parameter unless ``const_scale``) of ``scale_dims``, ``m`` of
    ``mask_dims`` and ``mask_dt``; ``swapped`` writes both the product and the sum the
    other way round; ``softmax=False`` leaves the softmax out."""
    q, fq = leaf("q", (1, 4, SEQ, DEPTH), dt)
    k, fk = leaf("k", (1, 2, KEYS, DEPTH), dt)
    v, fv = leaf("v", (1, 2, KEYS, DEPTH), dt)
    c = Tensor.const("c") if const_scale else Tensor.var("c")
    fc = with_facts(c, scale_dims, dt)
    m, fm = leaf("m", mask_dims, mask_dt)
    scores = gqa_scores(q, k)
    scaled = multiply(c, scores) if swapped else multiply(scores, c)
    masked = add(m, scaled) if swapped else add(scaled, m)
    probs = softmax_last(masked) if softmax else masked
    out_dims = tuple(max(x, y) for x, y in zip((1, 4, SEQ, KEYS), (1,) * (4 - len(mask_dims)) + mask_dims))
    facts = fq + fk + fv + fc + fm + with_facts(scores, (1, 4, SEQ, KEYS), dt)
    facts += with_facts(scaled, (1, 4, SEQ, KEYS), dt) + with_facts(masked, out_dims, dt)
    facts += with_facts(probs, out_dims, dt)
    return egraph([gqa_context(probs, v)], facts), attention


def key_case(keys=2 * PACK_BLOCK, rank=4):
    """``gqa_scores(q, k)`` over ``keys`` keys (``k`` of ``rank`` dimensions)."""
    q, fq = leaf("a", (1, 4, SEQ, DEPTH))
    k, fk = leaf("kv", (1, 2, keys, DEPTH)[4 - rank:])
    return egraph([gqa_scores(q, k)], fq, fk), gqa_scores_packed


def packing_case(rows=64, weight=True, merged=False):
    """``dense(x, W)`` on a weight of ``rows`` rows (a merge of it and another weight of
    ``rows`` rows when ``merged``); ``weight=False`` makes ``W`` an activation."""
    counts = (rows, rows) if merged else (rows,)
    _, _, denses, facts = x_and_weights(dts=(F32,) * len(counts), rows=counts, weights=weight)
    eg = egraph(denses, facts)
    if merged:
        saturate_family(eg, "merge_pair")
    return eg, merged_dense_packed if merged else dense_packed


def rotary_case(c_dims=(1, 1, SEQ, DEPTH), c_dt=F32, other_x=False, swapped=False):
    """``x * c + rotate_half(x) * s`` for ``x [1, 4, SEQ, DEPTH]``, cosines ``c`` of ``c_dims``
    and ``c_dt``; ``other_x`` rotates another tensor; ``swapped`` writes each product and the
    sum the other way round."""
    x, fx = leaf("x", (1, 4, SEQ, DEPTH))
    x2, fx2 = leaf("x2", (1, 4, SEQ, DEPTH))
    c, fc = leaf("c", c_dims, c_dt)
    sn, fs = leaf("sn", (1, 1, SEQ, DEPTH))
    turned = rotate_half(x2 if other_x else x)
    cos_term = multiply(c, x) if swapped else multiply(x, c)
    sin_term = multiply(sn, turned) if swapped else multiply(turned, sn)
    total = add(sin_term, cos_term) if swapped else add(cos_term, sin_term)
    out = tuple(max(p, q) for p, q in zip((1, 4, SEQ, DEPTH), (1,) * (4 - len(c_dims)) + c_dims))
    facts = fx + fx2 + fc + fs + with_facts(turned, (1, 4, SEQ, DEPTH)) + with_facts(cos_term, out, c_dt)
    facts += with_facts(sin_term, (1, 4, SEQ, DEPTH)) + with_facts(total, out)
    return egraph([total], facts), rotary


def projection_rotary_case(norm=False, heads=(1, SEQ, 4, 16), rows=64, weight=True,
                           axes=(0, 2, 1, 3), const_eps=True):
    """``rotary(permute_dims(reshape(dense(x, W), heads), axes), c, s)`` with a ``rows``-row
    ``W`` (an activation unless ``weight``); with ``norm``, a per-head ``rms_norm`` between
    the split and the permutation (``eps`` a parameter unless ``const_eps``)."""
    x, fx = leaf("x", (SEQ, 64))
    w, fw = leaf("w", (rows, 64), weight=weight)
    c, fc = leaf("c", (1, 1, SEQ, 16))
    sn, fs = leaf("sn", (1, 1, SEQ, 16))
    g, fg = leaf("g", (heads[-1],))
    eps = Tensor.const("eps") if const_eps else Tensor.var("eps")
    y = dense(x, w)
    split = reshape(y, shape_vec(heads))
    facts = fx + fw + fc + fs + fg + with_facts(eps, ()) + with_facts(y, (SEQ, rows)) + with_facts(split, heads)
    if norm:
        split = rms_norm(split, g, eps)
        facts += with_facts(split, heads)
    moved = permute_dims(split, shape_vec(axes))
    moved_dims = tuple(heads[a] for a in axes)
    facts += with_facts(moved, moved_dims)
    return egraph([rotary(moved, c, sn)], facts), rotary_norm_dense if norm else rotary_dense


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
    ("epilogue_bias", "b + x @ W^T", lambda: bias_case(), True),
    ("epilogue_bias", "x @ W^T + b", lambda: bias_case(swapped=True), True),
    ("epilogue_bias", "b of another length", lambda: bias_case(b_dims=(16,)), False),
    ("epilogue_bias", "b with the output's shape", lambda: bias_case(b_dims=(8, 32)), False),
    ("epilogue_bias", "b of another dtype", lambda: bias_case(b_dt=F16), False),
    ("merge_qkv", "three biased GEMMs on one x", lambda: merge_bias(), True),
    ("merge_qkv", "one GEMM without bias", lambda: merge_bias(biased=(True, False, True)), False),
    ("merge_pair", "two biased GEMMs", lambda: merge_bias(2, biased=(True, True)), True),
    ("rms_norm", "g * (x * rsqrt(mean(x^2) + eps))", lambda: norm_case(), True),
    ("rms_norm", "(x * rsqrt(mean(x^2) + eps)) * g", lambda: norm_case(swapped=True), True),
    ("rms_norm", "g not of x's last axis", lambda: norm_case(g_dims=(8,)), False),
    ("rms_norm", "eps not a scalar", lambda: norm_case(eps_dims=(64,)), False),
    ("rms_norm", "statistics of another x", lambda: norm_case(other_x=True), False),
    ("rms_norm", "g of another dtype", lambda: norm_case(dt=F16), False),
    ("prologue_rms_norm", "dense(rms_norm(x), W)", lambda: prologue_case(), True),
    ("prologue_rms_norm", "dense of no norm", lambda: prologue_case(normed=False), False),
    ("gqa_attention", "q @ repeat(k)^T", lambda: gqa_case(), True),
    ("gqa_attention", "p @ repeat(v)", lambda: gqa_case("context"), True),
    ("gqa_attention", "q @ repeat(k)^T, flattened", lambda: gqa_case(flat=True), True),
    ("gqa_attention", "p @ repeat(v), flattened", lambda: gqa_case("context", flat=True), True),
    ("gqa_attention", "H is not KV * n", lambda: gqa_case(heads=6), False),
    ("gqa_attention", "q and k of other D", lambda: gqa_case(inner=DEPTH // 2), False),
    ("gqa_attention", "p spans other keys", lambda: gqa_case("context", inner=KEYS + 1), False),
    ("gqa_attention", "another batch", lambda: gqa_case(batch=2), False),
    ("gqa_attention", "q of another dtype", lambda: gqa_case(dt=F16), False),
    ("gqa_attention", "k not transposed", lambda: gqa_case(axes=(0, 1, 2, 3)), False),
    (
        "gqa_attention",
        "flattened in another order",
        lambda: gqa_case(flat=True, q_rows=(SEQ, 4)),
        False,
    ),
    ("fused_attention", "softmax(q k^T * c + m) v", lambda: attention_case(), True),
    ("fused_attention", "softmax(m + c * q k^T) v", lambda: attention_case(swapped=True), True),
    ("fused_attention", "a mask of rank 2", lambda: attention_case(mask_dims=(SEQ, KEYS)), True),
    ("fused_attention", "c not a scalar", lambda: attention_case(scale_dims=(KEYS,)), False),
    ("fused_attention", "c a parameter, not a constant", lambda: attention_case(const_scale=False), False),
    ("fused_attention", "the mask broadcasts the scores", lambda: attention_case(mask_dims=(2, 1, SEQ, KEYS)),
     False),
    ("fused_attention", "a mask of another dtype", lambda: attention_case(mask_dt=F16), False),
    ("fused_attention", "no softmax", lambda: attention_case(softmax=False), False),
    ("rotary", "x * c + rotate_half(x) * s", lambda: rotary_case(), True),
    ("rotary", "s * rotate_half(x) + c * x", lambda: rotary_case(swapped=True), True),
    ("rotary", "cosines of rank 2", lambda: rotary_case(c_dims=(SEQ, DEPTH)), True),
    ("rotary", "rotate_half of another tensor", lambda: rotary_case(other_x=True), False),
    ("rotary", "the cosines broadcast x", lambda: rotary_case(c_dims=(2, 1, SEQ, DEPTH)), False),
    ("rotary", "cosines of another dtype", lambda: rotary_case(c_dt=F16), False),
    ("epilogue_rotary", "rotary of a projection's heads", lambda: projection_rotary_case(), True),
    ("epilogue_rotary", "with a per-head norm", lambda: projection_rotary_case(norm=True), True),
    ("epilogue_rotary", "the split is not N = H * D", lambda: projection_rotary_case(heads=(1, 2 * SEQ, 2, 16)),
     False),
    ("epilogue_rotary", "W an activation, not a weight", lambda: projection_rotary_case(weight=False), False),
    ("epilogue_rotary", "N not a multiple of the block", lambda: projection_rotary_case(heads=(1, SEQ, 5, 8), rows=40),
     False),
    ("epilogue_rotary", "another permutation", lambda: projection_rotary_case(axes=(0, 2, 3, 1)), False),
    ("epilogue_rotary", "eps a parameter, not a constant",
     lambda: projection_rotary_case(norm=True, const_eps=False), False),
    ("fast_exp", "softmax over float32", lambda: fast_exp_case(), True),
    ("fast_exp", "silu of float32", lambda: fast_exp_case("silu"), True),
    ("fast_exp", "softmax over float16", lambda: fast_exp_case(dt=F16), False),
    ("fast_exp", "silu of float16", lambda: fast_exp_case("silu", F16), False),
    ("fast_exp", "attention in float32", lambda: fast_attention_case(), True),
    ("fast_exp", "attention in float16", lambda: fast_attention_case(F16), False),
    ("key_layout", "scores over a multiple of the block of keys", lambda: key_case(), True),
    ("key_layout", "keys not a multiple of the block", lambda: key_case(keys=PACK_BLOCK + 1), False),
    ("key_layout", "keys of three dimensions", lambda: key_case(rank=3), False),
    ("weight_layout", "x @ W^T, N a multiple of the block", lambda: packing_case(), True),
    ("weight_layout", "N not a multiple of the block", lambda: packing_case(rows=72), False),
    ("weight_layout", "W an activation, not a weight", lambda: packing_case(weight=False), False),
    ("weight_layout", "a part of a merged GEMM", lambda: packing_case(merged=True), True),
    (
        "weight_layout",
        "merged rows not a multiple of the block",
        lambda: packing_case(rows=36, merged=True),
        False,
    ),
]


def _run_rms_then_prologue(build):
    def case():
        eg, constructor = build()
        saturate_family(eg, "rms_norm")
        return eg, constructor

    return case


CASES = [
    (f, c, _run_rms_then_prologue(b) if f == "prologue_rms_norm" else b, fires)
    for f, c, b, fires in CASES
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


def test_rms_norm_moves_through_reshapes_that_keep_the_last_axis():
    for keep_last in (True, False):
        eg, constructor = prologue_through_reshape(keep_last)
        assert (eg.function_size(constructor) > 0) == keep_last


def test_merged_biases_are_concatenated():
    eg, _ = merge_bias()
    saturate_family(eg, "merge_qkv")
    x = Tensor.var("x")
    ws = [Tensor.var(f"w{i}") for i in range(3)]
    bs = [Tensor.var(f"b{i}") for i in range(3)]
    wcat, bcat = concat(Vec[Tensor](*ws)), concat(Vec[Tensor](*bs))
    eg.check(
        eq(dense_bias(x, ws[1], bs[1])).to(merged_dense_bias(x, wcat, bcat, i64(64), i64(96))),
        eq(shape(bcat)).to(shape_vec((128,))),
    )


def test_gqa_rewrite_keeps_the_product_shape():
    """The flattened scores become ``reshape(gqa_scores(q, k), [B * H, S, L])``."""
    eg, _ = gqa_case(flat=True)
    saturate_family(eg, "gqa_attention")
    q, k = Tensor.var("a"), Tensor.var("kv")
    k_t = permute_dims(repeat_heads(k, i64(2)), shape_vec((0, 1, 3, 2)))
    flat = matmul(reshape(q, shape_vec((4, SEQ, DEPTH))), reshape(k_t, shape_vec((4, DEPTH, KEYS))))
    eg.check(
        eq(flat).to(reshape(gqa_scores(q, k), shape_vec((4, SEQ, KEYS)))),
        eq(shape(gqa_scores(q, k))).to(shape_vec((1, 4, SEQ, KEYS))),
        eq(shape(repeat_heads(k, i64(2)))).to(shape_vec((1, 4, KEYS, DEPTH))),
    )


def test_every_family_has_cases():
    assert {f for f, *_ in CASES} | {"reshape"} == set(FAMILIES)


def test_packed_gemms_join_the_e_class_of_the_product():
    """A packed GEMM is another way to compute the same value: same e-class, same shape."""
    eg, _ = packing_case(merged=True)
    saturate_family(eg, "weight_layout")
    x, w0, w1 = Tensor.var("x"), Tensor.var("w0"), Tensor.var("w1")
    wcat = concat(Vec[Tensor](w0, w1))
    eg.check(
        eq(dense(x, w0)).to(merged_dense_packed(x, wcat, i64(PACK_BLOCK), i64(0), i64(64))),
        eq(dense(x, w1)).to(merged_dense_packed(x, wcat, i64(PACK_BLOCK), i64(64), i64(128))),
        eq(shape(merged_dense_packed(x, wcat, i64(PACK_BLOCK), i64(64), i64(128)))).to(
            shape_vec((8, 64))
        ),
    )
    eg2, _ = packing_case()
    saturate_family(eg2, "weight_layout")
    eg2.check(eq(dense(x, w0)).to(dense_packed(x, w0, i64(PACK_BLOCK))))


def test_fast_exp_nodes_join_the_e_class_with_its_shape():
    for op, fast in (("softmax", fast_softmax_last), ("silu", fast_silu)):
        eg, _ = fast_exp_case(op)
        saturate_family(eg, "fast_exp")
        a = Tensor.var("a")
        exact = softmax_last(a) if op == "softmax" else silu(a)
        eg.check(eq(exact).to(fast(a)), eq(shape(fast(a))).to(shape_vec((2, 8, 128))),
                 eq(dtype(fast(a))).to(String(F32)))


def test_fused_attention_joins_the_context_e_class_with_its_shape():
    eg, _ = attention_case()
    saturate_family(eg, "fused_attention")
    saturate_family(eg, "fast_exp")
    q, k, v, m = (Tensor.var(n) for n in "qkvm")
    c = Tensor.const("c")
    context = gqa_context(softmax_last(add(multiply(gqa_scores(q, k), c), m)), v)
    fused, fast = attention(q, k, v, c, m), fast_attention(q, k, v, c, m)
    eg.check(eq(context).to(fused), eq(context).to(fast), eq(shape(fused)).to(shape_vec((1, 4, SEQ, DEPTH))),
             eq(shape(fast)).to(shape_vec((1, 4, SEQ, DEPTH))), eq(dtype(fast)).to(String(F32)))


def test_fused_rotary_joins_the_e_class_with_the_head_first_shape():
    eg, _ = projection_rotary_case(norm=True)
    saturate_family(eg, "epilogue_rotary")
    x, w, c, sn, g = (Tensor.var(n) for n in ("x", "w", "c", "sn", "g"))
    eps, heads = Tensor.const("eps"), shape_vec((1, SEQ, 4, 16))
    moved = permute_dims(rms_norm(reshape(dense(x, w), heads), g, eps), shape_vec((0, 2, 1, 3)))
    fused = rotary_norm_dense(x, w, g, eps, c, sn, heads)
    eg.check(eq(rotary(moved, c, sn)).to(fused), eq(shape(fused)).to(shape_vec((1, 4, SEQ, 16))),
             eq(dtype(fused)).to(String(F32)))

"""Rewrite rulesets over :mod:`extract.lang`, one ruleset per rewrite family.

Each family is a small table; every row is one egglog rule.  Conditions on
:func:`~extract.lang.shape` and :func:`~extract.lang.dtype` keep rules to the places
where they are valid (a value without a static shape never matches them).

=====================  ===============================================================
ruleset                rewrite
=====================  ===============================================================
``shapes``             (analysis) shape and dtype of the nodes that rewrites create
``transpose_fold``     ``matmul(x, permute_dims(W, [1, 0]))`` -> ``dense(x, W)``
``silu``               ``multiply(a, sigmoid(a))`` (either order) -> ``silu(a)``
``reshape``            move the frontend's reshapes out of the epilogue rules' way:
                       ``silu(reshape(a, s))`` -> ``reshape(silu(a), s)``,
                       ``multiply(reshape(a, s), reshape(b, s))`` ->
                       ``reshape(multiply(a, b), s)`` (same shapes), and drop
                       ``reshape(reshape(a, s1), s2)`` and ``reshape(a, shape(a))``
``merge_qkv``          three ``dense(x, Wi)`` on one ``x`` (2-D weights, same K and
                       dtype) -> the three parts of ``dense(x, concat(Wq, Wk, Wv))``
``merge_pair``         the same for two weights (gate/up; also pairs of Q/K/V)
``epilogue_silu_mul``  ``multiply(silu(dense(x, Wg)), dense(x, Wu))`` (either order)
                       -> ``silu_mul_dense(x, Wg, Wu)``
``epilogue_add``       ``add(r, dense(x, W))`` (either order, also through the reshape
                       the frontend puts around the product) -> ``dense_add(x, W, r)``
``epilogue_bias``      ``add(b, dense(x, W))`` (either order) -> ``dense_bias(x, W, b)``
                       when ``b`` is ``[N]`` for ``W [N, K]`` and of the product's dtype
``rms_norm``           ``g * (x * rsqrt(mean_last(square(x)) + eps))`` (either order of
                       each product) -> ``rms_norm(x, g, eps)`` when ``g`` is ``[H]`` for
                       ``x [..., H]``, ``eps`` a scalar, one dtype; and
                       ``reshape(rms_norm(x, g, eps), s)`` ->
                       ``rms_norm(reshape(x, s), g, eps)`` when ``s`` keeps the last axis
``prologue_rms_norm``  ``dense(rms_norm(x, g, eps), W)`` -> ``rms_norm_dense(x, g, eps, W)``
``gqa_attention``      grouped-query attention without the repeated K and V:
                       ``q @ permute_dims(repeat_heads(k, n), [0, 1, 3, 2])`` ->
                       ``gqa_scores(q, k)`` and ``p @ repeat_heads(v, n)`` ->
                       ``gqa_context(p, v)`` when ``H = KV * n`` and ``B``, ``D`` agree,
                       also through the frontend's reshapes to ``[B * H, ., .]``
``key_layout``         ``gqa_scores(q, k)`` -> ``gqa_scores_packed(q, k, b)`` when ``k``
                       is ``[B, KV, L, D]`` with ``L % b == 0``
``weight_layout``      ``dense(x, W)`` -> ``dense_packed(x, W, b)`` when ``W`` is a
                       2-D weight of ``N`` rows, ``N % b == 0``; and each part of a
                       merged GEMM -> its ``merged_dense_packed`` (``b`` is
                       :data:`PACK_BLOCK`)
``fused_attention``    ``gqa_context(softmax_last(gqa_scores(q, k) * c + m), v)`` (either
                       order of each product and sum) -> ``attention(q, k, v, c, m)``,
                       one kernel, when ``c`` is a scalar constant, the masked scores keep the
                       scores' shape (``m`` broadcasts to them) and all share one dtype
``rotary``             ``x * c + rotate_half(x) * s`` (either order of each product and
                       of the sum) -> ``rotary(x, c, s)`` when ``c`` and ``s`` broadcast to
                       ``x`` and all share one dtype (lowered as the same elementwise ops)
``epilogue_rotary``    ``rotary(permute_dims(reshape(dense(x, W), hs), [0, 2, 1, 3]), c, s)``
                       -> ``rotary_dense(x, W, c, s, hs)``, and the same with
                       ``rms_norm(reshape(...), g, eps)`` (Qwen3's per-head Q/K norm) ->
                       ``rotary_norm_dense``, one kernel each, when ``hs = [B, S, H, D]``
                       splits the product's ``N = H * D`` columns into heads and ``W`` is
                       a 2-D weight with ``N % b == 0`` (the kernel reads it packed,
                       :data:`PACK_BLOCK`), ``eps`` a constant
``fast_exp``           ``softmax_last(a)`` -> ``fast_softmax_last(a)``, ``silu(a)``
                       -> ``fast_silu(a)`` and ``attention(q, ...)`` ->
                       ``fast_attention(q, ...)`` when ``a`` or ``q`` is float32 (TVM's
                       ``fast_exp`` is float32 only): an approximation, so the
                       candidate's numerical check against the original decides
=====================  ===============================================================

Merges need weights (values with an :func:`~extract.lang.order`) and list them in
increasing order, so each set of weights is merged once.  The merge rulesets merge
``dense_bias`` GEMMs too (weights and biases concatenated alike).
"""

from __future__ import annotations

from egglog import (
    Ruleset,
    String,
    Vec,
    eq,
    i64,
    rewrite,
    rule,
    ruleset,
    set_,
    union,
    var,
    vars_,
)

from .lang import (
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

__all__ = ["ANALYSIS", "FAMILIES", "PACK_BLOCK", "RULESETS", "merge_rules"]

a, b, d, e, g, r, t, w, w2, x = vars_("a b d e g r t w w2 x", Tensor)
s, s2, sa, sw = vars_("s s2 sa sw", Vec[i64])
k, begin, end = vars_("k begin end", i64)
dt = var("dt", String)

# -- shapes (analysis) ----------------------------------------------------------------
# (node, facts binding its shape `s`, facts binding its dtype `dt`); an empty shape
# fact list means the node carries `s` itself.
_SHAPE_TABLE = [
    (sigmoid(a), [eq(s).to(shape(a))], [eq(dt).to(dtype(a))]),
    (silu(a), [eq(s).to(shape(a))], [eq(dt).to(dtype(a))]),
    (fast_silu(a), [eq(s).to(shape(a))], [eq(dt).to(dtype(a))]),
    (softmax_last(a), [eq(s).to(shape(a))], [eq(dt).to(dtype(a))]),
    (fast_softmax_last(a), [eq(s).to(shape(a))], [eq(dt).to(dtype(a))]),
    *(
        (
            node(a, b, d, e, g),
            [eq(sa).to(shape(a)), eq(sw).to(shape(d)), eq(s).to(Vec[i64](sa[0], sa[1], sa[2], sw[3]))],
            [eq(dt).to(dtype(a))],
        )
        for node in (attention, fast_attention)
    ),
    (square(a), [eq(s).to(shape(a))], [eq(dt).to(dtype(a))]),
    (rsqrt(a), [eq(s).to(shape(a))], [eq(dt).to(dtype(a))]),
    (
        mean_last(a),
        [eq(sa).to(shape(a)), eq(s).to(sa.set(sa.length() - 1, i64(1)))],
        [eq(dt).to(dtype(a))],
    ),
    (rms_norm(x, g, e), [eq(s).to(shape(x))], [eq(dt).to(dtype(x))]),
    (rotate_half(a), [eq(s).to(shape(a))], [eq(dt).to(dtype(a))]),
    (rotary(x, d, e), [eq(s).to(shape(x))], [eq(dt).to(dtype(x))]),
    *(
        (node, [eq(s).to(Vec[i64](s2[0], s2[2], s2[1], s2[3]))], [eq(dt).to(dtype(x))])
        for node in (rotary_dense(x, w, d, e, s2), rotary_norm_dense(x, w, g, b, d, e, s2))
    ),
    (
        add(a, b),
        [eq(s).to(shape(a)), eq(shape(b)).to(s)],
        [eq(dt).to(dtype(a)), eq(dtype(b)).to(dt)],
    ),
    (
        multiply(a, b),
        [eq(s).to(shape(a)), eq(shape(b)).to(s)],
        [eq(dt).to(dtype(a)), eq(dtype(b)).to(dt)],
    ),
    (reshape(a, s), [], [eq(dt).to(dtype(a))]),
    (dense_add(x, w, r), [eq(s).to(shape(r))], [eq(dt).to(dtype(r))]),
    (
        repeat_heads(a, k),
        [eq(sa).to(shape(a)), eq(s).to(Vec[i64](sa[0], sa[1] * k, sa[2], sa[3]))],
        [eq(dt).to(dtype(a))],
    ),
    (
        gqa_scores(a, b),
        [eq(sa).to(shape(a)), eq(sw).to(shape(b)), eq(s).to(Vec[i64](sa[0], sa[1], sa[2], sw[2]))],
        [eq(dt).to(dtype(a))],
    ),
    (
        gqa_context(a, b),
        [eq(sa).to(shape(a)), eq(sw).to(shape(b)), eq(s).to(Vec[i64](sa[0], sa[1], sa[2], sw[3]))],
        [eq(dt).to(dtype(a))],
    ),
]
# Products: x's shape with the last dimension replaced by `k`; dtype of x.
_PRODUCT_TABLE = [
    (dense(x, w), [eq(sw).to(shape(w)), eq(k).to(sw[0])]),
    (silu_mul_dense(x, w, w2), [eq(sw).to(shape(w)), eq(k).to(sw[0])]),
    (merged_dense(x, w, begin, end), [eq(k).to(end - begin)]),
    (dense_bias(x, w, b), [eq(sw).to(shape(w)), eq(k).to(sw[0])]),
    (merged_dense_bias(x, w, b, begin, end), [eq(k).to(end - begin)]),
    (rms_norm_dense(x, g, e, w), [eq(sw).to(shape(w)), eq(k).to(sw[0])]),
]


def _shape_rules():
    for node, shape_facts, dtype_facts in _SHAPE_TABLE:
        yield rule(eq(t).to(node), *shape_facts).then(set_(shape(t)).to(s))
        yield rule(eq(t).to(node), *dtype_facts).then(set_(dtype(t)).to(dt))
    for node, facts in _PRODUCT_TABLE:
        yield rule(eq(t).to(node), eq(sa).to(shape(x)), *facts).then(
            set_(shape(t)).to(sa.set(sa.length() - 1, k))
        )
        yield rule(eq(t).to(node), eq(dt).to(dtype(x))).then(set_(dtype(t)).to(dt))


ANALYSIS: Ruleset = ruleset(*_shape_rules(), name="shapes")

# -- rewrites -------------------------------------------------------------------------
_TRANSPOSE_FOLD = [
    # `permute_dims(W, [1, 0])` makes W 2-D, so `x @ permute_dims(W)` is `x @ W^T`.
    rewrite(matmul(x, permute_dims(w, Vec[i64](i64(1), i64(0))))).to(
        dense(x, w), eq(dtype(x)).to(dtype(w))
    ),
]

_SILU = [
    rewrite(multiply(a, sigmoid(a))).to(silu(a)),
    rewrite(multiply(sigmoid(a), a)).to(silu(a)),
]

_RESHAPE = [
    rewrite(silu(reshape(a, s))).to(reshape(silu(a), s)),
    rewrite(multiply(reshape(a, s), reshape(b, s))).to(
        reshape(multiply(a, b), s), eq(shape(a)).to(shape(b))
    ),
    rewrite(reshape(reshape(a, s), s2)).to(reshape(a, s2)),
    rewrite(reshape(a, s)).to(a, eq(shape(a)).to(s)),
]


def merge_rules(n: int) -> list:
    """The rules merging ``n`` GEMMs that share ``x`` into one.

    Parameters
    ----------
    n : int
        Number of weights merged (2 or more).

    Returns
    -------
    list
        Two egglog rules, for ``dense(x, W_i)`` and for ``dense_bias(x, W_i, b_i)``.
        Weights must be 2-D with the same K and dtype, and be weights listed in
        increasing :func:`~extract.lang.order`.  The first unions each ``dense(x, W_i)``
        with ``merged_dense(x, concat(W_1..W_n), begin_i, end_i)``; the second each
        ``dense_bias`` with ``merged_dense_bias(x, concat(W_i), concat(b_i), begin_i,
        end_i)``.  Both set the shape ``[sum N_i, K]`` and dtype of the concatenated
        weight (and ``[sum N_i]`` of the concatenated bias).
    """
    return [_merge_rule(n, bias=False), _merge_rule(n, bias=True)]


def _merge_rule(n: int, bias: bool):
    outs = [var(f"m{i}", Tensor) for i in range(n)]
    ws = [var(f"mw{i}", Tensor) for i in range(n)]
    bs = [var(f"mb{i}", Tensor) for i in range(n)]
    rows = [var(f"mn{i}", i64) for i in range(n)]
    shapes = [var(f"ms{i}", Vec[i64]) for i in range(n)]
    facts: list = []
    for i in range(n):
        product = dense_bias(x, ws[i], bs[i]) if bias else dense(x, ws[i])
        facts += [
            eq(outs[i]).to(product),
            eq(shapes[i]).to(shape(ws[i])),
            eq(shapes[i].length()).to(i64(2)),
            eq(rows[i]).to(shapes[i][0]),
            eq(shapes[i][1]).to(k),
            eq(dtype(ws[i])).to(dt),
        ]
        if i:
            facts.append(order(ws[i - 1]) < order(ws[i]))
    wcat = concat(Vec[Tensor](*ws))
    bcat = concat(Vec[Tensor](*bs))
    actions: list = []
    offset = i64(0)
    for i in range(n):
        part = (
            merged_dense_bias(x, wcat, bcat, offset, offset + rows[i])
            if bias
            else merged_dense(x, wcat, offset, offset + rows[i])
        )
        actions.append(union(outs[i]).with_(part))
        offset = offset + rows[i]
    actions += [set_(shape(wcat)).to(Vec[i64](offset, k)), set_(dtype(wcat)).to(dt)]
    if bias:
        actions += [set_(shape(bcat)).to(Vec[i64](offset)), set_(dtype(bcat)).to(dt)]
    return rule(*facts).then(*actions)


def _epilogue_silu_mul() -> list:
    # multiply(silu(gate), up) in both argument orders.
    rules = []
    for product in (multiply(silu(a), b), multiply(b, silu(a))):
        rules.append(
            rule(
                eq(t).to(product),
                eq(a).to(dense(x, w)),
                eq(b).to(dense(x, w2)),
                eq(shape(w)).to(shape(w2)),
                eq(dtype(w)).to(dtype(w2)),
            ).then(union(t).with_(silu_mul_dense(x, w, w2)))
        )
    return rules


def _epilogue_add() -> list:
    rules = []
    for total in (add(r, d), add(d, r)):
        rules.append(
            rule(
                eq(t).to(total),
                eq(d).to(dense(x, w)),
                eq(shape(r)).to(shape(d)),
                eq(dtype(r)).to(dtype(d)),
            ).then(union(t).with_(dense_add(x, w, r)))
        )
    # r + reshape(x @ W^T, s): add in the product's shape, then reshape.
    for total in (add(r, reshape(d, s)), add(reshape(d, s), r)):
        rules.append(
            rule(
                eq(t).to(total),
                eq(d).to(dense(x, w)),
                eq(shape(r)).to(s),
                eq(sa).to(shape(d)),
                eq(dtype(r)).to(dtype(d)),
            ).then(union(t).with_(reshape(dense_add(x, w, reshape(r, sa)), s)))
        )
    return rules


def _epilogue_bias() -> list:
    rules = []
    for total in (add(b, d), add(d, b)):
        rules.append(
            rule(
                eq(t).to(total),
                eq(d).to(dense(x, w)),
                eq(sw).to(shape(w)),
                eq(shape(b)).to(Vec[i64](sw[0])),
                eq(dtype(b)).to(dtype(d)),
            ).then(union(t).with_(dense_bias(x, w, b)))
        )
    return rules


def _rms_norm() -> list:
    rules = []
    for stat in (add(mean_last(square(x)), e), add(e, mean_last(square(x)))):
        for normed in (multiply(x, rsqrt(stat)), multiply(rsqrt(stat), x)):
            for scaled in (multiply(g, normed), multiply(normed, g)):
                rules.append(
                    rule(
                        eq(t).to(scaled),
                        eq(shape(e)).to(Vec[i64].empty()),
                        eq(sa).to(shape(x)),
                        eq(shape(g)).to(Vec[i64](sa[sa.length() - 1])),
                        eq(dt).to(dtype(x)),
                        eq(dtype(g)).to(dt),
                        eq(dtype(e)).to(dt),
                    ).then(union(t).with_(rms_norm(x, g, e)))
                )
    # RMSNorm works on the last axis, so it commutes with reshapes that keep that axis.
    rules.append(
        rule(
            eq(t).to(reshape(rms_norm(x, g, e), s)),
            eq(sa).to(shape(x)),
            eq(s[s.length() - 1]).to(sa[sa.length() - 1]),
        ).then(union(t).with_(rms_norm(reshape(x, s), g, e)))
    )
    return rules


_PROLOGUE_RMS_NORM = [
    rule(eq(t).to(dense(rms_norm(x, g, e), w))).then(union(t).with_(rms_norm_dense(x, g, e, w)))
]

def _gqa_attention() -> list:
    # `a` is q [B, H, S, D] (scores) or p [B, H, S, L] (context); `b` is k or v
    # [B, KV, L, D], repeated `k` times; `sa` and `sw` are their shapes.
    valid = [
        eq(sa).to(shape(a)),
        eq(sa.length()).to(i64(4)),
        eq(sw).to(shape(b)),
        eq(sw.length()).to(i64(4)),
        eq(sa[0]).to(sw[0]),
        eq(sa[1]).to(sw[1] * k),
        eq(dtype(a)).to(dtype(b)),
    ]
    k_t = permute_dims(repeat_heads(b, k), Vec[i64](i64(0), i64(1), i64(3), i64(2)))
    rows = sa[0] * sa[1]
    scores = [eq(sa[3]).to(sw[3])]  # q and k share D
    context = [eq(sa[3]).to(sw[2])]  # p spans the L keys of v
    return [
        rule(eq(t).to(matmul(a, k_t)), *valid, *scores).then(union(t).with_(gqa_scores(a, b))),
        rule(eq(t).to(matmul(a, repeat_heads(b, k))), *valid, *context).then(
            union(t).with_(gqa_context(a, b))
        ),
        # The frontend's batched matmul flattens [B, H] first.
        rule(
            eq(t).to(matmul(reshape(a, s), reshape(k_t, s2))),
            *valid,
            *scores,
            eq(s).to(Vec[i64](rows, sa[2], sa[3])),
            eq(s2).to(Vec[i64](rows, sw[3], sw[2])),
        ).then(union(t).with_(reshape(gqa_scores(a, b), Vec[i64](rows, sa[2], sw[2])))),
        rule(
            eq(t).to(matmul(reshape(a, s), reshape(repeat_heads(b, k), s2))),
            *valid,
            *context,
            eq(s).to(Vec[i64](rows, sa[2], sa[3])),
            eq(s2).to(Vec[i64](rows, sw[2], sw[3])),
        ).then(union(t).with_(reshape(gqa_context(a, b), Vec[i64](rows, sa[2], sw[3])))),
    ]


def _fused_attention() -> list:
    # q [B, H, S, D], kk and v [B, KV, L, D]: their shapes were checked by `gqa_attention`.
    q, kk, v, c, m, p, z, sc = vars_("aq ak av ac am ap az asc", Tensor)
    rules = []
    for scaled in (multiply(sc, c), multiply(c, sc)):
        for masked in (add(scaled, m), add(m, scaled)):
            rules.append(
                rule(
                    eq(t).to(gqa_context(p, v)),
                    eq(p).to(softmax_last(z)),
                    eq(z).to(masked),
                    eq(sc).to(gqa_scores(q, kk)),
                    eq(c).to(Tensor.const(var("ac_key", String))),  # baked into the kernel
                    eq(shape(c)).to(Vec[i64].empty()),
                    eq(shape(z)).to(shape(sc)),
                    eq(sa).to(shape(m)),
                    eq(dt).to(dtype(sc)),
                    eq(dtype(c)).to(dt),
                    eq(dtype(m)).to(dt),
                ).then(union(t).with_(attention(q, kk, v, c, m)))
            )
    return rules


def _rotary() -> list:
    # `d` and `e` are the cosines and sines; they broadcast to `x` (the sum keeps x's shape).
    rules = []
    for cos_term in (multiply(x, d), multiply(d, x)):
        for sin_term in (multiply(rotate_half(x), e), multiply(e, rotate_half(x))):
            for total in (add(cos_term, sin_term), add(sin_term, cos_term)):
                rules.append(
                    rule(
                        eq(t).to(total),
                        eq(shape(t)).to(shape(x)),
                        eq(dt).to(dtype(x)),
                        eq(dtype(d)).to(dt),
                        eq(dtype(e)).to(dt),
                    ).then(union(t).with_(rotary(x, d, e)))
                )
    return rules


def _epilogue_rotary() -> list:
    # The projection's [..., H * D] output split into heads `s2 = [B, S, H, D]` and moved to
    # [B, H, S, D]; the fused kernel reads the weight packed (a weight, N % PACK_BLOCK == 0).
    y = dense(x, w)
    heads = [
        eq(s2.length()).to(i64(4)),
        eq(sw).to(shape(w)),
        eq(sw.length()).to(i64(2)),
        eq(sw[0]).to(s2[2] * s2[3]),
        eq(sw[0] % i64(PACK_BLOCK)).to(i64(0)),
        eq(var("wo", i64)).to(order(w)),
    ]
    to_heads = Vec[i64](i64(0), i64(2), i64(1), i64(3))
    return [
        rule(eq(t).to(rotary(permute_dims(reshape(y, s2), to_heads), d, e)), *heads).then(
            union(t).with_(rotary_dense(x, w, d, e, s2))
        ),
        rule(
            eq(t).to(rotary(permute_dims(rms_norm(reshape(y, s2), g, b), to_heads), d, e)),
            *heads,
            eq(b).to(Tensor.const(var("eps_key", String))),  # baked into the kernel
        ).then(union(t).with_(rotary_norm_dense(x, w, g, b, d, e, s2))),
    ]


PACK_BLOCK = 16
"""Rows per block of a packed weight ``[N / b, K, b]``: 16 float32 values are one 512-bit
vector (AVX-512), so a packed GEMM's inner loop reads each weight block as contiguous
vector loads, one stream per block, instead of ``b`` rows ``4 K`` bytes apart."""


def _key_layout() -> list:
    # The scores read each key along D, so consecutive outputs (keys) lie D apart: a
    # register tile would gather them.  Packed into blocks of b keys, [B, KV, L / b, D, b],
    # they are read like a packed weight.  Unlike a weight, the keys change on every run,
    # so the packing is part of the kernel and of its measured cost.
    blk = i64(PACK_BLOCK)
    return [
        rule(eq(t).to(gqa_scores(a, b)), eq(sw).to(shape(b)), eq(sw.length()).to(i64(4)),
             eq(sw[2] % blk).to(i64(0))).then(union(t).with_(gqa_scores_packed(a, b, blk)))
    ]


def _weight_layout() -> list:
    # Packing is free only for weights: their layout changes once, when the program is
    # prepared (LiftTransformParams), not on every run.  Merged weights are concats of
    # weights (the merge rules only concatenate weights).
    blk = i64(PACK_BLOCK)
    two_d = [eq(sw).to(shape(w)), eq(sw.length()).to(i64(2)), eq(sw[0] % blk).to(i64(0))]
    return [
        rule(eq(t).to(dense(x, w)), eq(var("wo", i64)).to(order(w)), *two_d).then(
            union(t).with_(dense_packed(x, w, blk))
        ),
        rule(eq(t).to(merged_dense(x, w, begin, end)), *two_d).then(
            union(t).with_(merged_dense_packed(x, w, blk, begin, end))
        ),
    ]


_FAST_EXP = [
    # topi's fast_exp: a degree-5 polynomial on the reduced argument (Cephes' expf), the
    # input clamped to [-88.4, 88.4]; float32 only.
    rule(eq(t).to(softmax_last(a)), eq(dtype(a)).to(String("float32"))).then(
        union(t).with_(fast_softmax_last(a))
    ),
    rule(eq(t).to(silu(a)), eq(dtype(a)).to(String("float32"))).then(union(t).with_(fast_silu(a))),
    rule(eq(t).to(attention(a, b, d, e, g)), eq(dtype(a)).to(String("float32"))).then(
        union(t).with_(fast_attention(a, b, d, e, g))
    ),
]

_TABLE: dict[str, list] = {
    "transpose_fold": _TRANSPOSE_FOLD,
    "silu": _SILU,
    "reshape": _RESHAPE,
    "merge_qkv": merge_rules(3),
    "merge_pair": merge_rules(2),
    "epilogue_silu_mul": _epilogue_silu_mul(),
    "epilogue_add": _epilogue_add(),
    "epilogue_bias": _epilogue_bias(),
    "rms_norm": _rms_norm(),
    "prologue_rms_norm": _PROLOGUE_RMS_NORM,
    "gqa_attention": _gqa_attention(),
    "fused_attention": _fused_attention(),
    "rotary": _rotary(),
    "epilogue_rotary": _epilogue_rotary(),
    "key_layout": _key_layout(),
    "weight_layout": _weight_layout(),
    "fast_exp": _FAST_EXP,
}

FAMILIES: tuple[str, ...] = tuple(_TABLE)
"""Names of the rewrite rulesets, in the order a saturation iteration runs them."""

RULESETS: dict[str, Ruleset] = {name: ruleset(*rules, name=name) for name, rules in _TABLE.items()}
"""The rewrite rulesets by family name (the ``shapes`` analysis is :data:`ANALYSIS`)."""

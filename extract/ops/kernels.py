"""TE kernels of the term language's fused and rewritten operators.

Each ``*_te`` function builds the tensor expression of one operator's kernel; the
table (:mod:`extract.ops`) emits them as TE PrimFuncs, and
:mod:`tuner.cost_model.node_prices` rebuilds them from an e-node's shapes.  Tensors are
``te.Tensor`` of one float dtype; shapes are static.
"""

from __future__ import annotations

from typing import Any

from tvm import te, topi

from measure.tvmapi import tirx

__all__ = [
    "attention_te",
    "dense_add_te",
    "dense_bias_te",
    "dense_packed_te",
    "dense_te",
    "fast_silu_te",
    "fast_softmax_te",
    "gqa_context_te",
    "gqa_scores_packed_te",
    "gqa_scores_te",
    "rms_norm_dense_te",
    "rotary_dense_te",
    "silu_mul_dense_te",
]


def _gemm(x: te.Tensor, w: te.Tensor, name: str) -> te.Tensor:
    """``x @ w^T`` for ``x [..., K]`` and ``w [N, K]``: reads ``w`` in place."""
    k = te.reduce_axis((0, x.shape[-1]), name="k")
    return te.compute(
        (*x.shape[:-1], w.shape[0]),
        lambda *i: te.sum(x[(*i[:-1], k)] * w[i[-1], k], axis=k),
        name=name,
    )


def dense_te(x: te.Tensor, w: te.Tensor) -> te.Tensor:
    """TE of ``dense``: ``x [..., K]``, ``w [N, K]`` -> ``[..., N]`` in ``x``'s dtype."""
    return _gemm(x, w, "dense")


def dense_packed_te(x: te.Tensor, wp: te.Tensor) -> te.Tensor:
    """TE of ``dense_packed``: ``x [..., K]``, ``wp [N / b, K, b]`` -> ``[..., N]``.

    ``out[..., n] = sum_k x[..., k] * wp[n // b, k, n % b]``, where ``wp`` is ``W [N, K]``
    packed as ``wp[i, k, j] = W[i * b + j, k]`` (the blocked layout of TVM's CPU GEMM
    schedules: each block of ``b`` outputs streams one contiguous ``K x b`` panel).
    """
    block = wp.shape[2]
    k = te.reduce_axis((0, x.shape[-1]), name="k")
    return te.compute(
        (*x.shape[:-1], wp.shape[0] * block),
        lambda *i: te.sum(x[(*i[:-1], k)] * wp[i[-1] // block, k, i[-1] % block], axis=k),
        name="dense_packed",
    )


def dense_add_te(x: te.Tensor, w: te.Tensor, r: te.Tensor) -> te.Tensor:
    """TE of ``dense_add``: ``x @ w^T + r``; ``r`` has the product's shape."""
    y = _gemm(x, w, "dense")
    return te.compute(y.shape, lambda *i: y[i] + r[i], name="dense_add")


def silu_mul_dense_te(x: te.Tensor, wg: te.Tensor, wu: te.Tensor) -> te.Tensor:
    """TE of ``silu_mul_dense``: ``silu(x @ wg^T) * (x @ wu^T)`` in one PrimFunc."""
    g = _gemm(x, wg, "gate")
    u = _gemm(x, wu, "up")
    return te.compute(g.shape, lambda *i: g[i] * te.sigmoid(g[i]) * u[i], name="silu_mul_dense")


def fast_softmax_te(a: te.Tensor) -> te.Tensor:
    """TE of ``fast_softmax_last``: softmax over ``a``'s last axis with TVM's ``fast_exp``.

    ``topi.nn.fast_softmax``: row maximum, ``fast_exp(a - max)``, row sum, division.
    ``fast_exp`` (``topi.fast_exp``, float32 only) clamps its argument to about
    ``[-88.4, 88.4]`` and evaluates Cephes' ``expf`` polynomial, so it vectorises where
    ``exp`` becomes a scalar libm call per element.
    """
    return topi.nn.fast_softmax(a, axis=-1)


def fast_silu_te(a: te.Tensor) -> te.Tensor:
    """TE of ``fast_silu``: ``a * sigmoid(a)`` as ``a / (1 + fast_exp(-a))`` (float32).

    The clamp inside ``fast_exp`` keeps both tails finite: ``a`` far below zero gives
    ``a / (1 + 2.4e38)``, about 0, and far above gives ``a``.
    """
    e = topi.fast_exp(te.compute(a.shape, lambda *i: -a[i], name="negate"))
    return te.compute(a.shape, lambda *i: a[i] / (e[i] + tirx.const(1.0, a.dtype)), name="fast_silu")


def dense_bias_te(x: te.Tensor, w: te.Tensor, b: te.Tensor) -> te.Tensor:
    """TE of ``dense_bias``: ``x @ w^T + b`` for ``b [N]`` (broadcast over rows)."""
    y = _gemm(x, w, "dense")
    return te.compute(y.shape, lambda *i: y[i] + b[i[-1]], name="dense_bias")


def rms_norm_dense_te(x: te.Tensor, g: te.Tensor, w: te.Tensor, eps: float) -> te.Tensor:
    """TE of ``rms_norm_dense``: ``rms_norm(x, g, eps) @ w^T`` in one PrimFunc.

    ``x [..., K]``, ``g [K]``, ``w [N, K]`` -> ``[..., N]``.  Per row, the scale
    ``rsqrt(sum(x^2) / K + eps)`` is computed first; the GEMM reads ``x * g`` and the
    scale multiplies each output (RMSNorm, Zhang and Sennrich 2019: ``x / rms(x) * g``).
    """
    size = x.shape[-1]
    k = te.reduce_axis((0, size), name="k")
    sumsq = te.compute(
        x.shape[:-1], lambda *i: te.sum(x[(*i, k)] * x[(*i, k)], axis=k), name="sumsq"
    )
    scale = te.compute(
        x.shape[:-1],
        lambda *i: te.rsqrt(sumsq[i] / te.const(int(size), x.dtype) + te.const(eps, x.dtype)),
        name="rms_scale",
    )
    j = te.reduce_axis((0, size), name="j")
    y = te.compute(
        (*x.shape[:-1], w.shape[0]),
        lambda *i: te.sum(x[(*i[:-1], j)] * g[j] * w[i[-1], j], axis=j),
        name="dense",
    )
    return te.compute(y.shape, lambda *i: y[i] * scale[i[:-1]], name="rms_norm_dense")


def gqa_scores_te(q: te.Tensor, k: te.Tensor) -> te.Tensor:
    """TE of ``gqa_scores``: ``q [B, H, S, D]``, ``k [B, KV, L, D]`` -> ``[B, H, S, L]``.

    ``out[b, h, s, l] = sum_d q[b, h, s, d] * k[b, h // n, l, d]`` with ``n = H // KV``:
    grouped-query attention's scores (Ainslie et al. 2023) read each K head once for
    its ``n`` query heads instead of a repeated copy.
    """
    return _grouped_product(q, k, "gqa_scores", keys_last=True)


def gqa_scores_packed_te(q: te.Tensor, k: te.Tensor, block: int) -> te.Tensor:
    """TE of ``gqa_scores_packed``: ``gqa_scores(q, k)`` from keys packed in the kernel.

    ``q [B, H, S, D]``, ``k [B, KV, L, D]`` with ``L % block == 0`` -> ``[B, H, S, L]``.
    First ``kp[b, g, i, d, j] = k[b, g, i * block + j, d]`` (``[B, KV, L / block, D, block]``,
    the layout of :func:`dense_packed_te`'s weight), then
    ``out[b, h, s, l] = sum_d q[b, h, s, d] * kp[b, h // n, l // block, d, l % block]``,
    so ``block`` consecutive keys are read as one contiguous vector instead of ``D``
    elements apart.
    """
    batch, kv_heads, keys, dim = k.shape
    packed = te.compute((batch, kv_heads, keys // block, dim, block),
                        lambda b, g, i, d, j: k[b, g, i * block + j, d], name="keys_packed")
    group = q.shape[1] // kv_heads
    r = te.reduce_axis((0, dim), name="r")
    return te.compute(
        (q.shape[0], q.shape[1], q.shape[2], keys),
        lambda b, h, s, j: te.sum(q[b, h, s, r] * packed[b, h // group, j // block, r, j % block], axis=r),
        name="gqa_scores_packed",
    )


def gqa_context_te(p: te.Tensor, v: te.Tensor) -> te.Tensor:
    """TE of ``gqa_context``: ``p [B, H, S, L]``, ``v [B, KV, L, D]`` -> ``[B, H, S, D]``.

    ``out[b, h, s, d] = sum_l p[b, h, s, l] * v[b, h // n, l, d]`` with ``n = H // KV``.
    """
    return _grouped_product(p, v, "gqa_context", keys_last=False)


def attention_te(q: te.Tensor, k: te.Tensor, v: te.Tensor, mask: te.Tensor, scale: float,
                 fast: bool = False) -> te.Tensor:
    """TE of ``attention`` (``fast_attention`` when ``fast``): grouped-query attention in one PrimFunc.

    ``q [B, H, S, D]``, ``k [B, KV, L, D]``, ``v [B, KV, L, Dv]``, ``mask`` of rank 4 or less
    broadcasting to ``[B, H, S, L]`` (right-aligned, NumPy rules), all one float dtype
    -> ``[B, H, S, Dv]``. With ``n = H // KV`` and ``z = scale * (q @ k[:, h // n]^T) + mask``:
    ``out = (exp(z - max_l z) @ v[:, h // n]) / sum_l exp(z - max_l z)``, which is
    ``softmax(z) @ v`` with the division by the row sum applied to the ``Dv`` outputs
    instead of the ``L`` probabilities (as FlashAttention does, Dao et al. 2022).
    ``fast`` uses ``topi.fast_exp`` (float32 only, see :func:`fast_softmax_te`).
    Blocks: ``scores``, ``logits``, ``row_max``, ``shifted``, ``exp``, ``row_sum``,
    ``context``, ``attention``.
    """
    batch, heads, rows, dim = q.shape
    keys, group = k.shape[2], heads // k.shape[1]
    mask_at = _broadcast_reader(mask, 4)

    d = te.reduce_axis((0, dim), name="d")
    scores = te.compute((batch, heads, rows, keys),
                        lambda b, h, s, j: te.sum(q[b, h, s, d] * k[b, h // group, j, d], axis=d), name="scores")
    const = tirx.const(scale, q.dtype)
    logits = te.compute(scores.shape, lambda b, h, s, j: scores[b, h, s, j] * const + mask_at(b, h, s, j),
                        name="logits")
    j1 = te.reduce_axis((0, keys), name="j1")
    row_max = te.compute((batch, heads, rows), lambda b, h, s: te.max(logits[b, h, s, j1], axis=j1), name="row_max")
    shifted = te.compute(scores.shape, lambda b, h, s, j: logits[b, h, s, j] - row_max[b, h, s], name="shifted")
    exp = topi.fast_exp(shifted) if fast else te.compute(scores.shape, lambda *i: te.exp(shifted[i]), name="exp")
    j2 = te.reduce_axis((0, keys), name="j2")
    row_sum = te.compute((batch, heads, rows), lambda b, h, s: te.sum(exp[b, h, s, j2], axis=j2), name="row_sum")
    j3 = te.reduce_axis((0, keys), name="j3")
    context = te.compute((batch, heads, rows, v.shape[3]),
                         lambda b, h, s, e: te.sum(exp[b, h, s, j3] * v[b, h // group, j3, e], axis=j3),
                         name="context")
    return te.compute(context.shape, lambda b, h, s, e: context[b, h, s, e] / row_sum[b, h, s], name="attention")


def rotary_dense_te(x: te.Tensor, wp: te.Tensor, cos: te.Tensor, sin: te.Tensor,
                    heads: tuple[int, ...], g: te.Tensor | None = None, eps: float = 0.0) -> te.Tensor:
    """TE of ``rotary_dense`` (``rotary_norm_dense`` when ``g`` is given): a projection,
    its head split and rotary position embedding in one PrimFunc.

    ``x [..., K]`` (``M`` rows in all), ``wp [N / b, K, b]`` (``W [N, K]`` packed as for
    :func:`dense_packed_te`), ``heads = (B, S, H, D)`` with ``B * S = M`` and
    ``H * D = N``, ``cos`` and ``sin`` of rank 4 or less broadcasting to ``[B, H, S, D]``,
    ``g [D]``; one float dtype -> ``[B, H, S, D]``.  With ``y = x @ W^T`` as ``[M, H, D]``,
    optionally normalised per head (``y * rsqrt(mean_d(y^2) + eps) * g``, RMSNorm, Zhang
    and Sennrich 2019), ``out[b, h, s, d] = y[m, h, d] * cos + sign(d) * y[m, h, (d + D/2)
    % D] * sin`` with ``m = b * S + s`` and ``sign`` -1 on the first half of ``D``, +1 on the
    second: ``y * cos + rotate_half(y) * sin`` (RoFormer, Su et al. 2021, as transformers
    computes it).  Blocks: ``T_reshape`` (``x`` as ``[M, K]``, when not 2-D), ``dense_packed``, with ``g``
    ``sumsq`` and ``rms_scale``, then ``rotary``.
    """
    batch, seq, n_heads, dim = heads
    rows = batch * seq
    x2 = x if len(x.shape) == 2 else topi.reshape(x, (rows, x.shape[-1]))
    y = dense_packed_te(x2, wp)
    half = dim // 2
    if g is None:
        def normed(m: Any, h: Any, d: Any) -> Any:
            return y[m, h * dim + d]
    else:
        j = te.reduce_axis((0, dim), name="j")
        sumsq = te.compute((rows, n_heads), lambda m, h: te.sum(y[m, h * dim + j] * y[m, h * dim + j], axis=j),
                           name="sumsq")
        scale = te.compute(
            (rows, n_heads),
            lambda m, h: te.rsqrt(sumsq[m, h] / te.const(dim, x.dtype) + te.const(eps, x.dtype)),
            name="rms_scale",
        )

        def normed(m: Any, h: Any, d: Any) -> Any:
            return y[m, h * dim + d] * scale[m, h] * g[d]
    cos_at, sin_at = _broadcast_reader(cos, 4), _broadcast_reader(sin, 4)
    one = tirx.const(1.0, x.dtype)

    def rotate(b: Any, h: Any, s: Any, d: Any) -> Any:
        m = b * seq + s
        sign = tirx.Select(d < half, -one, one)
        return (normed(m, h, d) * cos_at(b, h, s, d)
                + sign * normed(m, h, (d + half) % dim) * sin_at(b, h, s, d))

    return te.compute((batch, n_heads, seq, dim), rotate, name="rotary")


def _broadcast_reader(t: te.Tensor, rank: int) -> Any:
    """``read(*i)``: ``t`` (rank ``rank`` or less) at the index ``i`` of the ``rank``-D
    shape it broadcasts to (right-aligned, NumPy rules: size-1 axes read index 0)."""
    pad = rank - len(t.shape)

    def read(*i: Any) -> Any:
        return t[tuple(0 if int(n) == 1 else x for x, n in zip(i[pad:], t.shape))]

    return read


def _grouped_product(a: te.Tensor, kv: te.Tensor, name: str, keys_last: bool) -> te.Tensor:
    """``a [B, H, S, R] @ kv[:, h // n]`` (transposed when ``keys_last``) over ``R``."""
    group = a.shape[1] // kv.shape[1]
    r = te.reduce_axis((0, a.shape[3]), name="r")

    def read(b: Any, h: Any, j: Any) -> Any:
        return kv[b, h // group, j, r] if keys_last else kv[b, h // group, r, j]

    return te.compute(
        (a.shape[0], a.shape[1], a.shape[2], kv.shape[2] if keys_last else kv.shape[3]),
        lambda b, h, s, j: te.sum(a[b, h, s, r] * read(b, h, j), axis=r),
        name=name,
    )

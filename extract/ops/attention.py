"""Attention operators: grouped-query products, packed keys and fused attention."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..rules import PACK_BLOCK
from .emit import lit, same_inputs, te_kernel
from .kernels import attention_te, gqa_context_te, gqa_scores_packed_te, gqa_scores_te
from .op import Op, Shape, Work, gemm_work
from .priors import FAST_EXP_GAIN, PACKED_GAIN

__all__ = ["OPS"]


def _scores_packed(lw: Any, term: Any, args: tuple, v: list) -> Any:
    block = lit(args[2])
    return lw.bb.emit_te(lambda q, k: gqa_scores_packed_te(q, k, block), v[0], v[1],
                         primfunc_name_hint="gqa_scores_packed")


def _attention(fast: bool) -> Any:
    name = "fast_attention" if fast else "attention"

    def lower(lw: Any, term: Any, args: tuple, v: list) -> Any:
        scale = lw.scalar(args[3])
        return lw.bb.emit_te(lambda q, k, vv, m: attention_te(q, k, vv, m, scale, fast),
                             v[0], v[1], v[2], v[4], primfunc_name_hint=name)

    return lower


def _attention_work(out_shape: Shape, arg_shapes: Sequence[Shape | None]) -> Work | None:
    """The scores and the context products, ``2 * B * H * S * L * D`` flops each, and the
    softmax over the ``[B, H, S, L]`` scores; None when the keys' shape is unknown."""
    if len(arg_shapes) > 1 and arg_shapes[1]:
        keys = arg_shapes[1][2]
        out = math.prod(out_shape)
        return Work(4.0 * out * keys, softmax=out // out_shape[-1] * keys)
    return None


OPS = (
    Op("gqa_scores", te_kernel(gqa_scores_te, "gqa_scores", 2), family="gqa_attention",
       work=gemm_work(1), kernel=same_inputs(gqa_scores_te, 2)),
    Op("gqa_context", te_kernel(gqa_context_te, "gqa_context", 2), family="gqa_attention",
       work=gemm_work(1), kernel=same_inputs(gqa_context_te, 2)),
    # The rewrite packs by PACK_BLOCK, so the kernel priced is that one.
    Op("gqa_scores_packed", _scores_packed, family="key_layout", work=gemm_work(1), prior_gain=PACKED_GAIN,
       kernel=same_inputs(lambda q, k: gqa_scores_packed_te(q, k, PACK_BLOCK), 2)),
    Op("attention", _attention(fast=False), family="fused_attention", work=_attention_work),
    Op("fast_attention", _attention(fast=True), family="fused_attention", second_family="fast_exp",
       work=_attention_work, softmax_gain=FAST_EXP_GAIN),
)
"""The entries."""

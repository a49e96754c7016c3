"""Rewritten operators that are not products: SiLU, ``fast_exp`` forms, RMSNorm, rotary embedding."""

from __future__ import annotations

from typing import Any

from tvm import relax

from .emit import relax_call, te_kernel
from .kernels import fast_silu_te, fast_softmax_te
from .op import Op
from .priors import FAST_EXP_GAIN
from .program import rotate_half

__all__ = ["OPS"]


def _rms_norm(lw: Any, term: Any, args: tuple, v: list) -> Any:
    eps = lw.scalar(args[2])
    return lw.bb.emit(relax.op.nn.rms_norm(v[0], v[1], axes=[-1], epsilon=eps))


def _rotary(lw: Any, term: Any, args: tuple, v: list) -> Any:
    bb = lw.bb
    turned = bb.emit(relax.op.multiply(rotate_half(bb, v[0]), v[2]))
    return bb.emit(relax.op.add(bb.emit(relax.op.multiply(v[0], v[1])), turned))


OPS = (
    Op("silu", relax_call(relax.op.nn.silu), family="silu"),
    Op("fast_silu", te_kernel(fast_silu_te, "fast_silu", 1), family="fast_exp", prior_gain=FAST_EXP_GAIN),
    Op("fast_softmax_last", te_kernel(fast_softmax_te, "fast_softmax", 1), family="fast_exp",
       prior_gain=FAST_EXP_GAIN),
    Op("rms_norm", _rms_norm, family="rms_norm"),
    Op("rotary", _rotary, family="rotary"),
)
"""The entries."""

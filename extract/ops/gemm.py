"""GEMM operators: ``dense``, its merged and packed forms, and the GEMMs with an epilogue
or prologue fused in."""

from __future__ import annotations

from typing import Any

from ..lang import ints
from ..rules import PACK_BLOCK
from .emit import gemm_inputs, lit, same_inputs, te_kernel
from .kernels import (
    dense_add_te,
    dense_bias_te,
    dense_packed_te,
    dense_te,
    rms_norm_dense_te,
    rotary_dense_te,
    silu_mul_dense_te,
)
from .op import Op, gemm_work
from .priors import PACKED_GAIN, ROTARY_FUSED_SLOWDOWN

__all__ = ["OPS"]

_dense = te_kernel(dense_te, "dense", 2)
_dense_bias = te_kernel(dense_bias_te, "dense_bias", 3)


def _dense_packed(lw: Any, term: Any, args: tuple, v: list) -> Any:
    """``x`` times the weight ``args[1]`` packed in blocks of ``args[2]`` rows."""
    packed = lw.packed(args[1], lit(args[2]))
    return lw.bb.emit_te(dense_packed_te, v[0], packed, primfunc_name_hint="dense_packed")


def _rms_norm_dense(lw: Any, term: Any, args: tuple, v: list) -> Any:
    eps = lw.scalar(args[2])
    return lw.bb.emit_te(lambda x, g, w: rms_norm_dense_te(x, g, w, eps), v[0], v[1], v[3],
                         primfunc_name_hint="rms_norm_dense")


def _rotary_dense(lw: Any, term: Any, args: tuple, v: list) -> Any:
    heads = ints(args[-1])
    packed = lw.packed(args[1], PACK_BLOCK)
    return lw.bb.emit_te(lambda x, wp, c, sn: rotary_dense_te(x, wp, c, sn, heads),
                         v[0], packed, v[2], v[3], primfunc_name_hint="rotary_dense")


def _rotary_norm_dense(lw: Any, term: Any, args: tuple, v: list) -> Any:
    heads = ints(args[-1])
    packed = lw.packed(args[1], PACK_BLOCK)
    eps = lw.scalar(args[3])
    return lw.bb.emit_te(lambda x, wp, g, c, sn: rotary_dense_te(x, wp, c, sn, heads, g, eps),
                         v[0], packed, v[2], v[4], v[5], primfunc_name_hint="rotary_norm_dense")


_ROTARY_GAIN = PACKED_GAIN / ROTARY_FUSED_SLOWDOWN  # reads the weight packed, rotates after the GEMM

OPS = (
    Op("dense", _dense, family="transpose_fold", work=gemm_work(1), kernel=gemm_inputs(dense_te, packed=False)),
    Op("merged_dense", _dense, family="merge", work=gemm_work(1), merged_begin=2,
       kernel=gemm_inputs(dense_te, packed=False)),
    Op("dense_packed", _dense_packed, family="weight_layout", second_family="weight_layout", work=gemm_work(1),
       prior_gain=PACKED_GAIN, kernel=gemm_inputs(dense_packed_te, packed=True)),
    Op("merged_dense_packed", _dense_packed, family="merge", second_family="weight_layout", work=gemm_work(1),
       prior_gain=PACKED_GAIN, merged_begin=3, kernel=gemm_inputs(dense_packed_te, packed=True)),
    Op("dense_bias", _dense_bias, family="epilogue_bias", work=gemm_work(1), kernel=same_inputs(dense_bias_te, 3)),
    Op("merged_dense_bias", _dense_bias, family="merge", work=gemm_work(1), merged_begin=3,
       kernel=same_inputs(dense_bias_te, 3)),
    Op("dense_add", te_kernel(dense_add_te, "dense_add", 3), family="epilogue_add", work=gemm_work(1),
       kernel=same_inputs(dense_add_te, 3)),
    Op("silu_mul_dense", te_kernel(silu_mul_dense_te, "silu_mul_dense", 3), family="epilogue_silu_mul",
       work=gemm_work(2), kernel=same_inputs(silu_mul_dense_te, 3)),
    Op("rms_norm_dense", _rms_norm_dense, family="prologue_rms_norm", work=gemm_work(1)),
    Op("rotary_dense", _rotary_dense, family="epilogue_rotary", second_family="weight_layout",
       work=gemm_work(1), prior_gain=_ROTARY_GAIN),
    Op("rotary_norm_dense", _rotary_norm_dense, family="epilogue_rotary", second_family="weight_layout",
       work=gemm_work(1), prior_gain=_ROTARY_GAIN),
)
"""The entries."""

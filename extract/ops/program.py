"""Operators of the input program: leaves, tuples and the Relax ops with their own constructor."""

from __future__ import annotations

import math
from typing import Any

from tvm import relax

from ..lang import ints
from ..translate import static_shape
from .emit import lit, relax_call, same_inputs
from .op import LoweringError, Op, gemm_work

__all__ = ["OPS", "rotate_half"]


def _reshape(lw: Any, term: Any, args: tuple, v: list) -> Any:
    new_shape = ints(args[1])
    old_shape = static_shape(v[0].ty)
    if old_shape is not None and math.prod(old_shape) != math.prod(new_shape):
        raise LoweringError(f"reshape of {list(old_shape)} to {list(new_shape)} in term {term}")
    return lw.bb.emit(relax.op.reshape(v[0], list(new_shape)))


def rotate_half(bb: relax.BlockBuilder, x: Any) -> Any:
    """``concat([-x[..., D/2:], x[..., :D/2]], -1)`` as the Relax ops it was translated from
    (two ``strided_slice``, ``negative``, ``concat``), emitted into ``bb``."""
    dims = static_shape(x.ty)
    last, half = len(dims) - 1, dims[-1] // 2
    upper = bb.emit(relax.op.strided_slice(x, axes=[last], begin=[half], end=[dims[-1]]))
    lower = bb.emit(relax.op.strided_slice(x, axes=[last], begin=[0], end=[half]))
    return bb.emit(relax.op.concat([bb.emit(relax.op.negative(upper)), lower], axis=-1))


OPS = (
    # Leaves and tuples: lowered by the lowerer itself (parameters, side tables, the root).
    Op("Tensor.var", priced=False),
    Op("Tensor.const", priced=False),
    Op("Tensor.opaque"),  # priced by its Relax op name
    Op("make_tuple", priced=False),
    Op("get_item", lambda lw, t, args, v: lw.bb.emit(relax.TupleGetItem(v[0], lit(args[1]))),
       priced=False),
    Op("matmul", relax_call(relax.op.matmul), work=gemm_work(1), kernel=same_inputs(None, 2)),
    Op("permute_dims", lambda lw, t, args, v: lw.bb.emit(relax.op.permute_dims(v[0], list(ints(args[1]))))),
    Op("reshape", _reshape, free=True),
    Op("concat", lambda lw, t, args, v: lw.bb.emit(relax.op.concat(lw.values(args[0]), axis=0)), free=True),
    Op("add", relax_call(relax.op.add)),
    Op("multiply", relax_call(relax.op.multiply)),
    Op("sigmoid", relax_call(relax.op.sigmoid)),
    Op("square", lambda lw, t, args, v: lw.bb.emit(relax.op.power(v[0], relax.const(2.0, v[0].ty.dtype)))),
    Op("mean_last", relax_call(relax.op.mean, axis=[-1], keepdims=True)),
    Op("rsqrt", relax_call(relax.op.rsqrt)),
    Op("softmax_last", relax_call(relax.op.nn.softmax, axis=-1)),
    Op("repeat_heads", lambda lw, t, args, v: lw.bb.emit(relax.op.repeat(v[0], lit(args[1]), axis=1))),
    Op("rotate_half", lambda lw, t, args, v: rotate_half(lw.bb, v[0])),
)
"""The entries, in :mod:`extract.lang`'s order."""

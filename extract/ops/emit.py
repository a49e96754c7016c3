"""Building blocks of the table's entries: common lowerings and kernel inputs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from egglog.deconstruct import get_literal_value

from ..rules import PACK_BLOCK
from .op import KernelInputs, Lower, Shape

__all__ = ["gemm_inputs", "lit", "relax_call", "same_inputs", "te_kernel"]


def lit(term: Any) -> Any:
    """The Python value of a literal term (an ``i64`` or ``String`` argument)."""
    return get_literal_value(term)


def relax_call(fn: Callable[..., Any], **attrs: Any) -> Lower:
    """Lowering to one Relax op over the tensor arguments, with fixed attributes."""
    return lambda lw, term, args, v: lw.bb.emit(fn(*v, **attrs))


def te_kernel(fn: Callable[..., Any], hint: str, arity: int) -> Lower:
    """Lowering to one TE PrimFunc named ``hint`` over the first ``arity`` arguments."""
    return lambda lw, term, args, v: lw.bb.emit_te(fn, *v[:arity], primfunc_name_hint=hint)


def same_inputs(fn: Callable[..., Any] | None, arity: int) -> KernelInputs:
    """Kernel inputs of exactly ``arity`` tensors, as the e-node has them."""
    return lambda shapes: (fn, list(shapes)) if len(shapes) == arity else None


def gemm_inputs(fn: Callable[..., Any], packed: bool) -> KernelInputs:
    """Kernel inputs ``x`` and ``W [N, K]`` of a GEMM, the weight packed into
    ``[N / PACK_BLOCK, K, PACK_BLOCK]`` when ``packed``."""

    def inputs(shapes: Sequence[Shape]) -> tuple[Callable, list[Shape]] | None:
        if len(shapes) < 2:
            return None
        rows, cols = shapes[1]
        weight = (rows // PACK_BLOCK, cols, PACK_BLOCK) if packed else shapes[1]
        return fn, [shapes[0], weight]

    return inputs

"""One operator of the term language: what lowering, extraction and e-node prices know of it."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["KernelInputs", "Lower", "LoweringError", "Op", "Shape", "Work", "WorkCount", "gemm_work"]

Shape = tuple[int, ...]

Lower = Callable[[Any, tuple, list], Any]
"""``lower(lowerer, args, values) -> Relax expression``: ``lowerer`` is the
:class:`extract.lowering.Lowerer` (its ``bb`` block builder and helpers), ``args`` the
node's arguments as terms, ``values`` the same with each tensor argument replaced by its
Relax expression (literals and vectors stay terms)."""

KernelInputs = Callable[[Sequence[Shape]], "tuple[Callable | None, list[Shape]] | None"]
"""``inputs(arg_shapes) -> (TE function, input shapes)`` of the one kernel an e-node lowers
to on its own (the TE function None for Relax's ``matmul``), or None when the shapes do
not fit it."""


class LoweringError(ValueError):
    """A term cannot be turned back into Relax (an unknown constructor or side-table key)."""


@dataclass(frozen=True)
class Work:
    """What an e-node computes, for the default latency model.

    Attributes
    ----------
    flops : float
        Floating-point operations (a multiply-add counts as 2).
    softmax : int
        Elements of a softmax computed inside the kernel and read twice from memory (a
        fused attention's scores); 0 for other kernels.
    """

    flops: float
    softmax: int = 0


WorkCount = Callable[[Shape, Sequence["Shape | None"]], "Work | None"]
"""``work(out_shape, arg_shapes) -> Work``, None where the shapes do not say (then the
default latency model counts one flop per output element)."""


def gemm_work(products: int) -> WorkCount:
    """Work of ``products`` GEMMs sharing the operand ``x [..., K]`` (the first argument):
    ``2 * products * out * K`` flops for ``out`` output elements."""

    def work(out_shape: Shape, arg_shapes: Sequence[Shape | None]) -> Work | None:
        x_shape = arg_shapes[0] if arg_shapes else None
        if not x_shape:
            return None
        return Work(2.0 * products * math.prod(out_shape) * x_shape[-1])

    return work


@dataclass(frozen=True)
class Op:
    """A constructor of :mod:`extract.lang` and everything the Python side knows of it.

    Attributes
    ----------
    name : str
        The constructor name as egglog prints it (``"dense"``, ``"Tensor.var"``).
    lower : Lower or None
        How it becomes Relax; None for the leaves and tuples :class:`extract.lowering.Lowerer`
        handles itself.  For a merged part (``merged_begin`` set) it emits the whole merged
        GEMM, which the lowerer emits once per merge and splits.
    family : str or None
        The rewrite family that introduces it (:data:`extract.rules.FAMILIES` names and
        ``"merge"``); None for constructors of the input program.
    second_family : str or None
        A second family it also belongs to (a packed weight is ``"weight_layout"``, a fast
        attention ``"fast_exp"``): an extraction strategy allows it only when it allows both.
    priced : bool
        False for leaves, tuples and tuple items: extraction charges them nothing, not even
        the least cost of a computing e-node.
    free : bool
        The default latency model charges nothing (a reshape, a load-time concatenation).
    work : WorkCount or None
        Its flops (and in-kernel softmax) for the default latency model; None: one flop
        per output element.
    prior_gain : float
        Prior only: how many times faster than its roofline time the default latency
        model takes it to run (below 1: slower).
    softmax_gain : float
        The same for its in-kernel softmax (``Work.softmax``).
    merged_begin : int or None
        For a part of a merged GEMM: the position of its ``begin`` argument (``end``
        follows); the arguments before it name the merged GEMM.
    kernel : KernelInputs or None
        The kernel of a GEMM-like e-node, for pricing it by a tuned kernel
        (:mod:`tuner.cost_model.node_prices`); None for other operators.
    """

    name: str
    lower: Lower | None = None
    family: str | None = None
    second_family: str | None = None
    priced: bool = True
    free: bool = False
    work: WorkCount | None = None
    prior_gain: float = 1.0
    softmax_gain: float = 1.0
    merged_begin: int | None = None
    kernel: KernelInputs | None = None

"""The operator table: one entry per constructor of the term language.

Each :class:`~extract.ops.op.Op` says how its constructor lowers back to Relax or TE
(:mod:`extract.lowering` dispatches on it), which rewrite families introduce it, what it
computes for the default latency model (:mod:`extract.extraction`) and, for a GEMM-like
operator, which kernel prices it (:mod:`tuner.cost_model.node_prices`).  Adding an
operator is one entry here (in the module of its kind), its egglog constructor in
:mod:`extract.lang` and its rules in :mod:`extract.rules`.

=====================  ============================================================
module                 operators
=====================  ============================================================
:mod:`.program`        leaves, tuples and the Relax ops of the input program
:mod:`.pointwise`      SiLU, ``fast_exp`` forms, RMSNorm, rotary embedding
:mod:`.gemm`           ``dense``, merged and packed GEMMs, fused epilogues/prologues
:mod:`.attention`      grouped-query products, packed keys, fused attention
=====================  ============================================================

Their TE kernels are in :mod:`.kernels`, the latency priors in :mod:`.priors`.
"""

from __future__ import annotations

from . import attention, gemm, pointwise, program
from .op import LoweringError, Op, Work
from .priors import FAST_EXP_GAIN, PACKED_GAIN, ROTARY_FUSED_SLOWDOWN

__all__ = [
    "FAST_EXP_GAIN",
    "NODE_NAMES",
    "OPS",
    "PACKED_GAIN",
    "REWRITE_NODES",
    "ROTARY_FUSED_SLOWDOWN",
    "SECOND_FAMILY",
    "LoweringError",
    "Op",
    "Work",
]


def _table(*groups: tuple[Op, ...]) -> dict[str, Op]:
    table: dict[str, Op] = {}
    for op in (op for group in groups for op in group):
        if op.name in table:
            raise ValueError(f"operator {op.name!r} has two entries")
        table[op.name] = op
    return table


OPS: dict[str, Op] = _table(program.OPS, pointwise.OPS, gemm.OPS, attention.OPS)
"""Every constructor of :mod:`extract.lang` by name, as egglog prints it."""

NODE_NAMES: frozenset[str] = frozenset(OPS)
"""Names of the term-language constructors as egglog prints them (its e-nodes)."""

REWRITE_NODES: dict[str, str] = {name: op.family for name, op in OPS.items() if op.family is not None}
"""Which rewrite family introduces each rewritten constructor (the others are in the
input program already).  ``merged_dense`` and its kin are ``"merge"``; the extracted
term says which merge (three or two weights)."""

SECOND_FAMILY: dict[str, str] = {
    name: op.second_family for name, op in OPS.items() if op.second_family is not None
}
"""Constructors that also belong to a second rewrite family (GEMMs on a packed weight:
``weight_layout``; ``fast_attention``: ``fast_exp``): an extraction strategy allows them
only when it allows both."""

"""Priors of the default latency model: how much faster or slower a rewritten kernel runs.

Used only before anything is measured (:func:`extract.extraction.default_node_cost`);
the table (:mod:`extract.ops`) gives each operator its gain from these.
"""

from __future__ import annotations

__all__ = ["FAST_EXP_GAIN", "PACKED_GAIN", "ROTARY_FUSED_SLOWDOWN"]

PACKED_GAIN = 1.25
"""Prior only (before anything is measured): how much faster a GEMM on a packed weight
runs, memory- or compute-bound. The gains measured were 1.5x to 2x; a quarter is a
conservative share of that (see docs/decisions.md, "Prior node costs: packed weights,
fast_exp, fused rotary embedding")."""

FAST_EXP_GAIN = 2.0
"""Prior only (before anything is measured): how much faster softmax and SiLU run with
TVM's ``fast_exp`` (exact ``exp`` compiles to one scalar libm call per element). The prior
is half the least gain measured (see docs/decisions.md, "Prior node costs: packed
weights, fast_exp, fused rotary embedding")."""

ROTARY_FUSED_SLOWDOWN = 1.2
"""Prior only (before anything is measured): how much slower a projection runs with its
rotary embedding (and per-head norm) in the same kernel than alone: the rotation reads
past the GEMM's register tile, so it runs after it (:mod:`tuner.space.gemm_seeds`). See
docs/decisions.md, "Prior node costs: packed weights, fast_exp, fused rotary embedding"."""

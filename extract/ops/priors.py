"""Priors of the default latency model: how much faster or slower a rewritten kernel runs.

Used only before anything is measured (:func:`extract.extraction.default_node_cost`);
the table (:mod:`extract.ops`) gives each operator its gain from these.
"""

from __future__ import annotations

__all__ = ["FAST_EXP_GAIN", "PACKED_GAIN", "ROTARY_FUSED_SLOWDOWN"]

PACKED_GAIN = 1.25
"""Prior only (before anything is measured): how much faster a GEMM on a packed weight
runs, memory- or compute-bound. The decode gate/up GEMV of Qwen3-0.6B on a 2-core
AVX-512 CPU read its weight at 27 to 29 GB/s packed against 14 GB/s at best in the stored
layout (16 sampled schedules each, weights cold); on a 2-core AVX2 CPU the prefill
projections (M = 128) ran at 35 to 37 GFLOP/s packed against 16 to 24 GFLOP/s on a
``[K, N]`` weight, both with the register-blocked seeds of :mod:`tuner.space.gemm_seeds` (a
stored ``[N, K]`` weight gets no seed). A quarter is a conservative share of that."""

FAST_EXP_GAIN = 2.0
"""Prior only (before anything is measured): how much faster softmax and SiLU run with
TVM's ``fast_exp``. On a 2-core AVX-512 CPU (Zen 4), best of the row seeds and 8 sampled
schedules each, hot: softmax over 128 x 128 scores of 16 heads 487 us exact against 100 us
fast, over 128 x 640 3.19 ms against 0.79 ms, decode's 1 x 512 17 us against 6 us; SiLU
times up on 128 x 3072 0.91 ms against 0.10 ms. Exact ``exp`` compiles to one scalar libm
call per element. Half the least of those gains is the prior."""

ROTARY_FUSED_SLOWDOWN = 1.2
"""Prior only (before anything is measured): how much slower a projection runs with its
rotary embedding (and per-head norm) in the same kernel than alone. On a 2-core AVX2 CPU
(Zen 3), Qwen3-0.6B's Q projection with its norm and rotation, best of the seeds and 8
sampled schedules each, hot: 3.73 ms fused against 3.26 ms for the packed GEMM alone at
M = 128, 128.5 us against 93.1 us at M = 1 (the rotation reads past the GEMM's register
tile, so it runs after it; see :mod:`tuner.space.gemm_seeds`)."""

"""Split-k schedules seeded into the search of a decode GEMV on a row-major weight (CPU targets).

A GEMV ``y[n] = sum_k x[k] * w[k, n]`` (an output of fewer rows than the smallest
register tile, :data:`tuner.space.gemm_seeds.TILE_ROWS`) is bound by reading ``w`` once.
The register tiles of :mod:`tuner.space.gemm_seeds` give each core a panel of columns and
run ``k`` inside it, so a core reads a few hundred bytes of each weight row, one row
a whole row's width apart: on a row-major ``[K, N]`` weight that is a strided
gather the prefetchers follow poorly. Splitting ``k`` instead (``rfactor``) gives
each core whole rows: block ``p`` of ``k`` sums its rows into a partial output
``partial[p, n]`` (one row, held in the L1 cache), reading the weight in one
contiguous sweep; a second, small block adds the partials. Every sum changes its
order (within float32 rounding).

Split-k beats the register tiles and MetaSchedule's own tuning on such a GEMV, and
with enough parts the weight streams at the machine's copy bandwidth (see
docs/decisions.md, "Split-k seeds for a decode GEMV on a row-major weight"). More parts
than cores balance the cores.

The seeds apply to a kernel with one GEMM-like block (:func:`tuner.space.gemm_seeds.gemm_block`)
of fewer than ``TILE_ROWS[0]`` output rows whose weight is read as ``w[..., k, n]``
(not a packed weight ``wp[n // b, k, n % b]``, whose ``k`` runs are already
contiguous); outer spatial axes (heads of a batched GEMV) are spread over the cores
with the parts. An epilogue (a residual add) runs after the partials are added,
in the same column loop. They are ordinary traces, measured and learned from like
sampled ones (:mod:`tuner.search.search`).
"""

from __future__ import annotations

import tvm

from measure.tvmapi import PrimFunc, Schedule, tirx

from .gemm_seeds import TILE_ROWS, gemm_block, vector_lanes

SPLIT_K_PARTS = (16, 8)
"""Blocks of ``k``, the most promising first (see the module's figures); a part must
hold at least one vector's worth of rows."""


def split_k_seeds(func: PrimFunc, target: tvm.target.Target) -> list[Schedule]:
    """Split-k schedules of a GEMV on a row-major weight, one per :data:`SPLIT_K_PARTS`.

    Parameters
    ----------
    func : PrimFunc
        A kernel with one GEMM-like block of output ``[..., M, N]`` (``M`` below
        ``TILE_ROWS[0]``) reading a weight ``w[..., k, n]``, possibly followed by
        elementwise epilogue blocks.
    target : tvm.target.Target
        Only ``llvm`` targets get seeds; the vector width comes from its features.

    Returns
    -------
    list of Schedule
        The schedules TVM accepted: none for a kernel of another form, for ``N`` not
        a multiple of the vector width, or for ``K`` below ``parts * lanes``.
    """
    if target.kind.name != "llvm":
        return []
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    probe = Schedule(mod)
    name = gemm_block(probe)
    if name is None or not _reads_weight_rows(probe, name):
        return []
    *_, i, j, k = (int(probe.get(loop).extent) for loop in probe.get_loops(probe.get_sblock(name)))
    lanes = vector_lanes(target)
    if i >= TILE_ROWS[0] or j % lanes:
        return []
    seeds = []
    for parts in SPLIT_K_PARTS:
        if k < parts * lanes:
            continue
        sch = Schedule(mod)
        try:
            _split_k(sch, name, parts, lanes)
        except (RuntimeError, ValueError):  # ScheduleError is a RuntimeError: a primitive refused
            continue
        seeds.append(sch)
    return seeds


def _reads_weight_rows(sch: Schedule, name: str) -> bool:
    """Whether the block reads an operand as ``w[..., k, n]``: ``n`` last (not ``n % b``), ``k`` before it."""
    block = sch.get(sch.get_sblock(name))
    n_var, k_var = block.iter_vars[-2].var, block.iter_vars[-1].var
    for region in block.reads:
        if len(region.region) < 2:
            continue
        last, before = region.region[-1].min, region.region[-2].min
        if isinstance(last, tirx.Var) and last.same_as(n_var) and isinstance(before, tirx.Var) \
                and before.same_as(k_var):
            return True
    return False


def _split_k(sch: Schedule, name: str, parts: int, lanes: int) -> None:
    """``k`` split into ``parts`` blocks, each summed into its own partial row by one parallel task;
    the partials then added, ``n`` vectorised in both; epilogues computed at the final column loop."""
    block = sch.get_sblock(name)
    k = sch.get_loops(block)[-1]
    ko, _ = sch.split(k, [parts, None])
    partial = sch.rfactor(ko, 0)
    *outer, i, j, ko, ki = sch.get_loops(partial)
    sch.reorder(*outer, ko, i, ki, j)
    sch.parallel(sch.fuse(*outer, ko) if outer else ko)
    sch.vectorize(sch.split(j, [None, lanes])[1])
    sch.decompose_reduction(partial, ki)
    *outer, i, j, ko = sch.get_loops(block)
    jo, ji = sch.split(j, [None, lanes])
    sch.reorder(jo, ko, ji)
    sch.vectorize(ji)
    for consumer in sch.get_consumers(block):
        sch.reverse_compute_at(consumer, jo)
        sch.vectorize(sch.get_loops(consumer)[-1])
    if outer:
        sch.parallel(sch.fuse(*outer))
    sch.decompose_reduction(block, ko)

"""Row-wise schedules seeded into the search of a fused attention kernel (CPU targets).

The e-graph's ``attention`` node (:func:`extract.ops.kernels.attention_te`) is one PrimFunc
of eight blocks: ``scores``, ``logits``, ``row_max``, ``shifted``, the exponentials,
``row_sum``, ``context`` and ``attention`` (the division by the row sum). Untuned, each
block sweeps the whole ``[B, H, S, L]`` scores in memory, which is the decomposed form's
traffic in one kernel. The seed computes attention one query row at a time, as a
FlashAttention-style kernel does (Dao et al. 2022) with the whole row of ``L`` keys
kept in cache (``L`` floats): the output's ``(b, h, s)`` loops are fused into one
parallel row loop, the elementwise ``logits`` is inlined into its two readers (a
multiply-add; the exponentials read ``shifted`` many times, so it stays), every other
block is computed under the row loop (``compute_at``), and the context is accumulated
as ``L`` vector updates over the ``Dv`` outputs (the key loop outside, the output loop
vectorised), so each row of ``V`` is read as contiguous vectors. A second seed also
vectorises the scores' dot products over ``D`` by ``rfactor`` (a vector of partial sums
in a local buffer under each key, then across it), as the row seeds of
:mod:`tuner.space.row_seeds` do for a softmax's row reductions.

At decode the vectorised seed beats the decomposed kernels; over a prompt it does not:
one query row at a time reads all of ``K`` and ``V`` once per row, where the decomposed
products are register-blocked GEMMs (see docs/decisions.md, "Row-wise seeds for the
fused attention kernel").

They are ordinary traces, measured and learned from like sampled ones.
"""

from __future__ import annotations

import tvm

from measure.tvmapi import PrimFunc, Schedule

from .gemm_seeds import vector_lanes
from .row_seeds import accepted_schedules

BLOCKS = ("scores", "logits", "row_max", "shifted", "row_sum", "context", "attention")
"""Blocks every fused attention kernel has, by name (besides its exponentials)."""


def attention_seeds(func: PrimFunc, target: tvm.target.Target) -> list[Schedule]:
    """Row-wise schedules of a fused attention kernel: dot products serial, then vectorised.

    Parameters
    ----------
    func : PrimFunc
        A kernel with the blocks of :data:`BLOCKS` (an exponential block between
        ``shifted`` and ``row_sum``), ``attention`` the last; other kernels get none.
    target : tvm.target.Target
        Only ``llvm`` targets get seeds; the vector width comes from its features.

    Returns
    -------
    list of Schedule
        The schedules TVM accepted; the vectorised-dot-product one only when ``D`` is a
        multiple of the vector width.
    """
    if target.kind.name != "llvm":
        return []
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    sch = Schedule(mod)
    names = [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))]
    if len(names) != len(BLOCKS) + 1 or names[-1] != "attention" or not set(BLOCKS) <= set(names):
        return []
    dim = int(sch.get(sch.get_sblock("scores")).iter_vars[-1].dom.extent)
    return accepted_schedules(mod, _rowwise, vector_lanes(target), dim)


def _rowwise(sch: Schedule, lanes: int) -> None:
    """Schedule ``sch`` one query row at a time; ``lanes`` > 0 also vectorises the dot products."""
    sch.compute_inline(sch.get_sblock("logits"))
    out = sch.get_sblock("attention")
    others = list(sch.get_child_blocks(sch.get_sblock("root")))[:-1]
    *rows, _ = sch.get_loops(out)
    row = sch.fuse(*rows)
    sch.parallel(row)
    for block in reversed(others):
        sch.compute_at(block, row, preserve_unit_loops=False)
    sch.vectorize(sch.get_loops(out)[-1])
    shifted = sch.get_sblock("shifted")
    for block in (shifted, *sch.get_consumers(shifted)):  # the exponentials, elementwise over the keys
        sch.vectorize(sch.get_loops(block)[-1])
    context = sch.get_sblock("context")
    output, key = sch.get_loops(context)[-2:]
    sch.reorder(key, output)
    sch.vectorize(output)
    sch.decompose_reduction(context, key)
    scores = sch.get_sblock("scores")
    if lanes:
        _, inner = sch.split(sch.get_loops(scores)[-1], [None, lanes])
        partial = sch.rfactor(inner, 0)
        # the partial sums of one key under that key's loop, in a local buffer (registers)
        sch.compute_at(partial, sch.get_loops(scores)[-2], preserve_unit_loops=False)
        sch.set_scope(partial, 0, "local")
        *_, lane, outer = sch.get_loops(partial)  # compute_at made a loop per iter var, the lane's first
        if int(sch.get(lane).extent) != lanes:
            raise ValueError("rfactor's loops are not (lane, d outer)")
        sch.reorder(outer, lane)
        sch.vectorize(lane)
        sch.decompose_reduction(partial, outer)

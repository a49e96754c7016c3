"""Row-wise schedules seeded into the search of row-reduction kernels such as softmax (CPU targets).

A softmax over the last axis is four loop nests in TVM's legalized form (row
maximum, exponentials, row sum, division), each sweeping the whole tensor. The
seed does what a hand-written softmax does (one row at a time, the row kept in
the L1 cache between its passes, rows spread over the cores): the leading
spatial axes of the output are fused into one parallel row loop, every other
block is computed under it (``compute_at``), spatial intermediates read by one
block only are inlined, and each block's last loop is vectorised. A second seed
also vectorises the row reductions: the reduction axis is split by the vector
width and ``rfactor``-ed into a vector of partial results (max is exact; a sum
changes its summation order, within float32 rounding).

The seeds start the search near the good schedules (the vectorised reductions the
faster); the exponentials bound all of them (see docs/decisions.md, "Row-wise seeds
for softmax-like row reductions"), which is why the e-graph also
offers the softmax with TVM's vectorisable ``fast_exp`` (ruleset ``fast_exp``,
:mod:`extract.rules`); its kernel gets these seeds too.

The seeds apply to kernels whose every block iterates the same leading spatial
axes and one last axis of one extent, with at least one reduction over that last
axis and a spatial output block (a legalized RMSNorm is not of that form: its row
statistics have one axis fewer). They are ordinary traces, measured and learned
from like sampled ones (:mod:`tuner.search.search`).
"""

from __future__ import annotations

import tvm

from measure.tvmapi import PrimFunc, Schedule

from .gemm_seeds import vector_lanes

_SPATIAL, _REDUCE = 0, 2  # IterVar kinds: data-parallel, commutative reduction


def row_seeds(func: PrimFunc, target: tvm.target.Target) -> list[Schedule]:
    """Row-wise schedules of a row-reduction kernel: reductions serial, then reductions vectorised.

    Parameters
    ----------
    func : PrimFunc
        A kernel such as a legalized softmax: blocks over ``[*rows, L]``, at least one
        reducing over ``L``, the last one spatial.
    target : tvm.target.Target
        Only ``llvm`` targets get seeds; the vector width comes from its features.

    Returns
    -------
    list of Schedule
        The schedules TVM accepted (none for a kernel of another form); the
        vectorised-reduction one only when ``L`` is a multiple of the vector width.
    """
    if target.kind.name != "llvm":
        return []
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    length = _row_length(Schedule(mod))
    if length is None:
        return []
    lanes = vector_lanes(target)
    return accepted_schedules(mod, _rowwise, lanes, length)


def accepted_schedules(mod: tvm.IRModule, schedule, lanes: int, extent: int) -> list[Schedule]:
    """``schedule(Schedule(mod), n)`` with ``n = 0`` (serial reductions), then with ``n = lanes``
    (reductions vectorised) when ``extent``, the reduced axis, is a multiple of ``lanes``
    larger than it: the schedules TVM accepted.

    A primitive TVM refuses raises ``ScheduleError`` (a ``RuntimeError``) or the
    schedule function's own ``ValueError``; that option is left out.
    """
    seeds = []
    for n in [0] + ([lanes] if extent % lanes == 0 and extent > lanes else []):
        sch = Schedule(mod)
        try:
            schedule(sch, n)
        except (RuntimeError, ValueError):
            continue
        seeds.append(sch)
    return seeds


def _row_length(sch: Schedule) -> int | None:
    """The last axis' extent when every block iterates ``[*rows, L]`` as the seed needs, else None."""
    blocks = [sch.get(b) for b in sch.get_child_blocks(sch.get_sblock("root"))]
    if len(blocks) < 2:
        return None
    shapes = set()
    kinds_seen = set()
    for block in blocks:
        kinds = [int(iv.iter_type) for iv in block.iter_vars]
        if len(kinds) < 2 or any(k != _SPATIAL for k in kinds[:-1]) or kinds[-1] not in (_SPATIAL, _REDUCE):
            return None
        shapes.add(tuple(int(iv.dom.extent) for iv in block.iter_vars))
        kinds_seen.add(kinds[-1])
    if len(shapes) != 1 or _REDUCE not in kinds_seen or int(blocks[-1].iter_vars[-1].iter_type) != _SPATIAL:
        return None
    return next(iter(shapes))[-1]


def _rowwise(sch: Schedule, lanes: int) -> None:
    """Schedule ``sch`` row by row; ``lanes`` > 0 also vectorises each reduction by ``rfactor``."""
    blocks = list(sch.get_child_blocks(sch.get_sblock("root")))
    output, others = blocks[-1], blocks[:-1]
    for block in reversed(others):  # an elementwise step read once is recomputed in its reader
        if _kind(sch, block) == _SPATIAL and len(sch.get_consumers(block)) == 1:
            try:
                sch.compute_inline(block)
                others.remove(block)
            except RuntimeError:
                pass
    partials = []
    if lanes:  # each row reduction into a vector of partial results, then across the vector
        for block in [b for b in others if _kind(sch, b) == _REDUCE]:
            _, inner = sch.split(sch.get_loops(block)[-1], [None, lanes])
            partial = sch.rfactor(inner, 0)
            partials.append(partial)
            others.insert(others.index(block), partial)
    *rows, _ = sch.get_loops(output)
    row = sch.fuse(*rows) if len(rows) > 1 else rows[0]
    sch.parallel(row)
    for block in reversed(others):
        sch.compute_at(block, row, preserve_unit_loops=False)
    sch.vectorize(sch.get_loops(output)[-1])
    for block in others:
        if block in partials:
            *_, lane, ko = sch.get_loops(block)  # compute_at made a loop per iter var, the lane's first
            if int(sch.get(lane).extent) != lanes:
                raise ValueError("rfactor's loops are not (lane, k outer)")
            sch.reorder(ko, lane)
            sch.vectorize(lane)
            sch.decompose_reduction(block, ko)
        elif _kind(sch, block) == _SPATIAL:
            sch.vectorize(sch.get_loops(block)[-1])


def _kind(sch: Schedule, block) -> int:
    """``_REDUCE`` for a block with a reduction axis (anywhere: ``rfactor`` moves it first), else ``_SPATIAL``."""
    return _REDUCE if any(int(iv.iter_type) == _REDUCE for iv in sch.get(block).iter_vars) else _SPATIAL

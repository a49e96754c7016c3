"""Register-blocked GEMM schedules seeded into a kernel's search (CPU targets).

MetaSchedule's CPU space (multi-level tiling ``SSRSRS``) holds good GEMM
schedules, but a handful of random draws rarely hits one: on a prefill GEMM the
best of 8 to 16 sampled traces reached a fifth of the BLAS throughput. The
schedules below are the structure of a BLAS micro-kernel (Goto and van de Geijn,
"Anatomy of high-performance matrix multiplication", ACM TOMS 34(3), 2008;
the 6 x 16 AVX2 kernel of BLIS): an ``mr x nr`` tile of the output held in
vector registers (``mr`` rows unrolled, ``nr`` columns as ``nr / lanes``
vectors), updated once per ``k`` by ``mr`` broadcasts of ``x`` and ``nr / lanes``
vector loads of the weight, optionally with ``k`` blocked so a weight panel of
``kc x nr`` stays in the L1 cache; output panels are spread over the cores.

They apply where the weight is read along the output's last axis, so that
``nr`` consecutive outputs read consecutive weights: a weight packed by the
``weight_layout`` rules (``wp[n // b, k, n % b]``) or a ``[K, N]`` operand
(``w[k, n]``, for example the value operand of attention). A GEMM whose weight
is read as ``w[n, k]`` gets no seed: its columns would be gathered. Epilogues in
the same kernel (residual add, SiLU-times-up) are fused into the tile's write.

The seeds are ordinary traces: they are measured, stored, replayed and learned
from like sampled ones; the search measures them first (:mod:`tuner.search`).
"""

from __future__ import annotations

import tvm

from measure.tvmapi import PrimFunc, Schedule

# (mr, nr in vectors, kc): the BLIS-style micro-kernels tried, most promising first.
# 6 x 2 vectors keeps 12 accumulators in registers (16 on AVX2, 32 on AVX-512);
# kc = 256 keeps a weight panel of 256 x nr floats in L1.
SEED_TILES = ((6, 2, 256), (4, 2, 0))


def vector_lanes(target: tvm.target.Target) -> int:
    """float32 lanes of the target's widest vector register: 16 (AVX-512), 8 (AVX/AVX2), else 4."""
    from tvm.target import codegen

    for feature, lanes in (("avx512f", 16), ("avx", 8)):
        try:
            if codegen.target_has_features(feature, target):
                return lanes
        except Exception:  # a target without x86 features (Arm, GPU)
            return 4
    return 4


def gemm_seeds(func: PrimFunc, target: tvm.target.Target, tiles=SEED_TILES) -> list[Schedule]:
    """Register-blocked schedules of ``func``'s GEMM, one per tile of ``tiles`` that applies.

    Parameters
    ----------
    func : PrimFunc
        A kernel with one GEMM-like block (spatial axes, then one reduction axis
        ``k``; its last spatial axis ``n`` indexes the last axis of an operand
        read along ``n``), possibly followed by elementwise epilogue blocks.
    target : tvm.target.Target
        Only ``llvm`` targets get seeds; the vector width comes from its features.
    tiles : sequence of (mr, vectors, kc)
        Micro-kernel shapes: ``mr`` output rows, ``vectors * lanes`` output columns,
        ``kc`` the ``k`` block (0: not blocked).

    Returns
    -------
    list of Schedule
        The schedules that TVM accepted: none for a kernel of another form, and no
        tile larger than the GEMM's output (a decode GEMV of one row gets none).
    """
    if target.kind.name != "llvm":
        return []
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    probe = Schedule(mod)
    name = _gemm_block(probe)
    if name is None:
        return []
    lanes = vector_lanes(target)
    seeds = []
    for mr, vectors, kc in tiles:
        sch = Schedule(mod)
        try:
            _register_block(sch, name, mr, vectors * lanes, lanes, kc)
        except (RuntimeError, ValueError):  # ScheduleError is a RuntimeError: a primitive refused the tile
            continue
        seeds.append(sch)
    return seeds


def _gemm_block(sch: Schedule) -> str | None:
    """The name of the kernel's only GEMM-like block whose weight is read along ``n``, or None."""
    found = []
    for block_rv in sch.get_child_blocks(sch.get_sblock("root")):
        block = sch.get(block_rv)
        kinds = [int(iv.iter_type) for iv in block.iter_vars]
        if kinds.count(2) != 1 or kinds[-1] != 2 or len(kinds) < 3 or 2 in kinds[:-1]:
            continue  # IterVar kind 2 is a reduction (CommReduce)
        n_var, k_var = block.iter_vars[-2].var, block.iter_vars[-1].var
        if any(_indexes_last(region, n_var) for region in block.reads) and any(
                _uses(region.region[-1].min, k_var) for region in block.reads):
            found.append(block.name_hint)
    return found[0] if len(found) == 1 else None


def _uses(expr, var) -> bool:
    return any(v.same_as(var) for v in tvm.tirx.analysis.undefined_vars(expr, []))


def _indexes_last(region, n_var) -> bool:
    """Whether the read's last index is ``n`` or ``n % c``: consecutive ``n`` read consecutive elements."""
    last = region.region[-1].min
    if isinstance(last, tvm.tirx.FloorMod):
        last = last.a
    return isinstance(last, tvm.tirx.Var) and last.same_as(n_var)


def _register_block(sch: Schedule, name: str, mr: int, nr: int, lanes: int, kc: int) -> None:
    block = sch.get_sblock(name)
    *outer, i, j, k = sch.get_loops(block)
    rows, cols = int(sch.get(i).extent), int(sch.get(j).extent)
    if rows < mr or cols < nr:
        raise ValueError(f"a {rows} x {cols} output is smaller than the {mr} x {nr} tile (a GEMV has no tile)")
    io, ii = sch.split(i, [None, mr])
    jo, jm, jv = sch.split(j, [None, nr // lanes, lanes])
    blocked = bool(kc) and kc < int(sch.get(k).extent)
    if blocked:  # the tile's sums leave the registers after each k block: no local buffer
        ko, ki = sch.split(k, [None, kc])
        sch.reorder(jo, ko, io, ki, ii, jm, jv)
        written, home = block, jo
    else:  # the tile's sums stay in a local buffer until written once
        sch.reorder(jo, io, k, ii, jm, jv)
        written, home = sch.cache_write(block, 0, "local"), io
        sch.reverse_compute_at(written, home)
        sch.vectorize(sch.get_loops(written)[-1])
    for consumer in sch.get_consumers(written):
        try:
            sch.reverse_compute_inline(consumer)
        except RuntimeError:  # not inlinable into a reduction (k blocked): its own loop under the panel
            sch.reverse_compute_at(consumer, home)
            sch.vectorize(sch.get_loops(consumer)[-1])
    sch.unroll(ii)
    sch.unroll(jm)
    sch.vectorize(jv)
    sch.parallel(sch.fuse(*outer, jo) if outer else jo)
    sch.decompose_reduction(block, ko if blocked else k)

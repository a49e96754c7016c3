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
(``w[k, n]``, for example the value operand of attention; or the keys of attention's
scores packed inside the kernel by the ``key_layout`` rule, whose packing loop the seed
spreads over the cores too). A GEMM whose weight is read as ``w[n, k]`` gets no seed:
its columns would be gathered. Epilogues in
the same kernel (residual add, SiLU-times-up) are fused into the tile's write; one
that reads past the tile (a per-head norm, a rotary embedding) runs after the GEMM in
loops of its own, spread over the cores.

The tile is not fixed: :func:`seed_tiles` enumerates a small grid of ``mr``,
vector count and ``k`` block that fits the target's vector registers and the
GEMM's shape. The seeds are ordinary traces: they are measured, stored, replayed
and learned from like sampled ones; the search measures the two most promising
first and puts the rest in its pool, where the cost model ranks them beside
sampled schedules (:mod:`tuner.search.search`).
"""

from __future__ import annotations

import tvm

from measure.tvmapi import PrimFunc, Schedule, tirx

# The micro-kernel grid: rows ``mr``, columns in vectors, and the ``k`` block ``kc``
# (0: not blocked; the tile's sums then stay in a local buffer until written once).
TILE_ROWS = (4, 6, 8, 12, 14, 16)
TILE_VECTORS = (1, 2, 3, 4)
K_BLOCKS = (0, 128, 256)
SKINNY_VECTORS = (1, 2, 4, 8)
"""Vectors per tile for an output of fewer rows than the smallest ``mr`` (a decode GEMV):
the tile is all its rows, and wider, since each weight vector is used by so few rows
that the FMA can read it from memory instead of holding it in a register. Wider than 8
vectors read no faster (see docs/decisions.md, "Register-blocked GEMM seeds: tile order
and decode GEMV widths")."""
LEADING_SEEDS = 2
"""Seeds measured first: the most promising blocked and unblocked tiles. The others
join the search's pool, for the cost model to rank beside sampled schedules."""
L1_PANEL_BYTES = 32 * 1024  # a k block's weight panel (kc x nr float32) should fit a 32 KiB L1 data cache


def vector_lanes(target: tvm.target.Target) -> int:
    """float32 lanes of the target's widest vector register: 16 (AVX-512), 8 (AVX/AVX2), else 4."""
    return {"avx512f": 16, "avx": 8}.get(_vector_isa(target), 4)


def vector_registers(target: tvm.target.Target) -> int:
    """Architectural vector registers: 32 with AVX-512 (zmm0-31), else 16 (x86 ymm/xmm; a safe floor elsewhere)."""
    return 32 if _vector_isa(target) == "avx512f" else 16


def _vector_isa(target: tvm.target.Target) -> str | None:
    from tvm.target import codegen

    for feature in ("avx512f", "avx"):
        try:
            if codegen.target_has_features(feature, target):
                return feature
        except Exception:  # a target without x86 features (Arm, GPU)
            return None
    return None


def seed_tiles(rows: int, cols: int, depth: int, lanes: int, registers: int) -> list[tuple[int, int, int]]:
    """The grid's micro-kernels ``(mr, vectors, kc)`` for a ``rows x cols`` output summed over ``depth``.

    A tile must fit the register file: ``mr * vectors`` accumulators, ``vectors`` weight
    loads and one broadcast of ``x`` (the BLIS register budget), and the output
    (``mr <= rows``, ``vectors * lanes <= cols``); ``kc`` must be below ``depth``.
    ``mr`` is one of :data:`TILE_ROWS`; an output with fewer rows (a decode GEMV) gets
    tiles of all its rows and :data:`SKINNY_VECTORS`, and a single row's weight vectors
    need no registers of their own (the FMA reads them from memory).

    Order, most promising first: the first blocked and the first unblocked tile (the
    ``LEADING_SEEDS``), then the rest; each by: columns a whole number of tiles (a
    ragged column edge is predicated inside the vector loop, several times slower; see
    docs/decisions.md, "Register-blocked GEMM seeds: tile order and decode GEMV
    widths"), then accumulators within three quarters of
    the registers (BLIS's hand-written kernels keep 12 of 16 on AVX2, 6 x 16, and 24
    of 32 on AVX-512; more leaves the compiler too few to avoid spills), then the
    accumulators doing useful work (``mr * vectors`` times the share of the output
    the padded tiles cover, so that a tile that leaves a ragged edge ranks lower),
    then a weight panel that fits in L1, then the larger ``kc``.
    """
    if rows < TILE_ROWS[0]:  # a skinny output: one tile of all its rows; a lone row's weight feeds the FMA from memory
        grid = [(rows, v, v if rows > 1 else 0) for v in SKINNY_VECTORS]
    else:
        grid = [(mr, v, v) for mr in TILE_ROWS for v in TILE_VECTORS]
    tiles = [(mr, v, kc) for mr, v, loads in grid for kc in K_BLOCKS
             if mr * v + loads + 1 <= registers and mr <= rows and v * lanes <= cols and kc < depth]

    def key(tile):
        mr, v, kc = tile
        nr = v * lanes
        useful = mr * v * rows / (-(-rows // mr) * mr) * cols / (-(-cols // nr) * nr)
        return cols % nr != 0, mr * v > 3 * registers // 4, -round(useful, 6), kc * nr * 4 > L1_PANEL_BYTES, -kc

    tiles.sort(key=key)
    leading = [t for t in (next((t for t in tiles if t[2]), None), next((t for t in tiles if not t[2]), None)) if t]
    return leading + [t for t in tiles if t not in leading]


def gemm_seeds(func: PrimFunc, target: tvm.target.Target, tiles=None) -> list[Schedule]:
    """Register-blocked schedules of ``func``'s GEMM, one per tile that applies.

    Parameters
    ----------
    func : PrimFunc
        A kernel with one GEMM-like block (spatial axes, then one reduction axis
        ``k``; its last spatial axis ``n`` indexes the last axis of an operand
        read along ``n``), possibly followed by elementwise epilogue blocks.
    target : tvm.target.Target
        Only ``llvm`` targets get seeds; vector width and register count come from its features.
    tiles : sequence of (mr, vectors, kc), optional
        Micro-kernel shapes: ``mr`` output rows, ``vectors * lanes`` output columns,
        ``kc`` the ``k`` block (0: not blocked). Default: :func:`seed_tiles` of the
        GEMM's shape, in its order.

    Returns
    -------
    list of Schedule
        The schedules that TVM accepted, in the order of ``tiles``: none for a kernel
        of another form, and no tile larger than the GEMM's output.
    """
    if target.kind.name != "llvm":
        return []
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    probe = Schedule(mod)
    name = gemm_block(probe)
    if name is None:
        return []
    lanes = vector_lanes(target)
    if tiles is None:
        *_, i, j, k = (int(probe.get(loop).extent) for loop in probe.get_loops(probe.get_sblock(name)))
        tiles = seed_tiles(i, j, k, lanes, vector_registers(target))
    seeds = []
    for mr, vectors, kc in tiles:
        for apart in (False, True):
            sch = Schedule(mod)
            try:
                _register_block(sch, name, mr, vectors * lanes, lanes, kc, apart)
            except (RuntimeError, ValueError):  # ScheduleError is a RuntimeError: a primitive refused the tile
                continue
            seeds.append(sch)
            break
    return seeds


def gemm_block(sch: Schedule) -> str | None:
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
    return any(v.same_as(var) for v in tirx.analysis.undefined_vars(expr, []))


def _indexes_last(region, n_var) -> bool:
    """Whether the read's last index is ``n`` or ``n % c``: consecutive ``n`` read consecutive elements."""
    last = region.region[-1].min
    if isinstance(last, tirx.FloorMod):
        last = last.a
    return isinstance(last, tirx.Var) and last.same_as(n_var)


def _register_block(sch: Schedule, name: str, mr: int, nr: int, lanes: int, kc: int, apart: bool = False) -> None:
    """Tile the GEMM block ``name`` (see :func:`gemm_seeds`). An epilogue that cannot be
    inlined is computed under the tile, or, with ``apart`` (an epilogue that reads past
    the tile: a norm over a head, a rotation), after the GEMM in loops of its own."""
    block = sch.get_sblock(name)
    producers = [p for p in sch.get_producers(block) if all(int(iv.iter_type) == 0 for iv in sch.get(p).iter_vars)]
    *outer, i, j, k = sch.get_loops(block)
    rows, cols = int(sch.get(i).extent), int(sch.get(j).extent)
    if rows < mr or cols < nr:
        raise ValueError(f"a {rows} x {cols} output is smaller than the {mr} x {nr} tile")
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
    later = []
    for consumer in sch.get_consumers(written):
        try:
            sch.reverse_compute_inline(consumer)
        except RuntimeError:  # not inlinable into a reduction (k blocked): its own loop under the panel
            if apart:
                later.append(sch.get(consumer).name_hint)
                continue
            sch.reverse_compute_at(consumer, home)
            sch.vectorize(sch.get_loops(consumer)[-1])
    sch.unroll(ii)
    sch.unroll(jm)
    sch.vectorize(jv)
    sch.parallel(sch.fuse(*outer, jo) if outer else jo)
    sch.decompose_reduction(block, ko if blocked else k)
    for producer in producers:
        _spread(sch, producer)
    for block_name in _downstream(sch, later):
        _spread(sch, sch.get_sblock(block_name))


def _downstream(sch: Schedule, names: list[str]) -> list[str]:
    """``names`` and every block that consumes them, transitively, each once, in order found."""
    found: list[str] = []
    todo = list(names)
    while todo:
        name = todo.pop(0)
        if name in found:
            continue
        found.append(name)
        todo.extend(sch.get(c).name_hint for c in sch.get_consumers(sch.get_sblock(name)))
    return found


def _spread(sch: Schedule, block) -> None:
    """A block before the GEMM (keys packed in the kernel) or after it (an epilogue that
    reads past the tile): its outer loops spread over the cores and its last loop
    vectorised; left serial where TVM refuses."""
    loops = sch.get_loops(block)
    if len(loops) > 2:
        try:
            sch.parallel(sch.fuse(*loops[:-2]))
            sch.vectorize(loops[-1])
        except RuntimeError:  # ScheduleError: the tile stands without it
            pass

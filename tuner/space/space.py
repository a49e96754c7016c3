"""Schedule candidates of one kernel from TVM's ``s_tir`` schedule space.

The design space is MetaSchedule's post-order-apply space with the target's
default schedule rules; candidates are traces sampled from it (MetaSchedule's
replay-trace strategy, postprocessors applied), keyed by their trace JSON. The
untuned default, the unscheduled kernel (empty trace), is always candidate 0.
:meth:`ScheduleSpace.mutate` gives neighbours of measured schedules with the
target's MetaSchedule mutators (tile sizes, compute location, unroll, parallel
extent), the step MetaSchedule's evolutionary search takes.

A kernel whose GEMM feeds an epilogue that also reads another producer (the
fused ``silu_mul_dense`` reads two GEMMs, ``rms_norm_dense`` a GEMM and the row
statistics) has no space under the default rules: multi-level tiling fuses the
epilogue under the GEMM's loops with ``reverse_compute_at``, which TVM refuses
there. Such a kernel falls back to the same rules with multi-level tiling's
write reuse off (each GEMM tiled on its own, the epilogue a loop nest of its
own in the same kernel, CPU targets only); ``space_note`` says so.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

import numpy as np
import tvm

from database import DEFAULT_TRACE_JSON, CandidateRecord, WorkloadRecord
from extract.imported import first_line
from measure.tvmapi import (
    ArgInfo,
    PrimFunc,
    Schedule,
    apply_trace,
    kernel_hash,
    load_trace,
    ms,
    mutate_trace,
    register_tensor_intrinsics,
    trace_to_json,
)
from tuner.cost_model.xgb import N_FEATURES, featurize

from .attention_seeds import attention_seeds
from .gemm_seeds import gemm_seeds
from .gemv_seeds import split_k_seeds
from .row_seeds import row_seeds


@dataclass(frozen=True)
class ScheduleCandidate:
    """A schedule of a kernel: its record and the scheduled IRModule (``main``)."""

    record: CandidateRecord
    mod: tvm.IRModule

    @functools.cached_property
    def program_hash(self) -> str:
        """Structural hash of the scheduled program: two traces that schedule the kernel into the
        same loop nest (a tile split the simplifier undoes, an unroll of a loop of extent 1) share it."""
        return kernel_hash(self.mod["main"])


class ScheduleSpace:
    """The schedule space of one kernel on one target.

    Parameters
    ----------
    func : PrimFunc
        The kernel (unscheduled).
    workload_hash : str
        Its workload key.
    target : tvm.target.Target
        The target whose schedule rules define the space.
    seed : int
        Seed of the sampler (a fixed seed makes a rerun sample the same traces).
    """

    def __init__(self, func: PrimFunc, workload_hash: str, target: tvm.target.Target, seed: int = 0) -> None:
        self.workload_hash = workload_hash
        self.mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
        self.args_info = ArgInfo.from_prim_func(self.mod["main"])
        self.target, self.seed = target, seed
        register_tensor_intrinsics(target)
        self.context = self._context("post-order-apply")
        self._design_spaces = None
        self._seeds: list[ScheduleCandidate] | None = None
        self.space_error: str | None = None
        self.space_note: str | None = None
        self._rng = np.random.default_rng(seed)

    def _context(self, space_generator) -> ms.TuneContext:
        target = self.target
        return ms.TuneContext(
            self.mod,
            target=target,
            space_generator=space_generator,
            search_strategy="replay-trace",
            task_name=self.workload_hash[:12],
            num_threads=1,  # one sampling thread: a fixed seed then draws the same traces in the same order
            rand_state=self.seed,
        )

    def _generate(self) -> list:
        try:
            return list(self.context.generate_design_space())
        except Exception as err:  # TVM raises ScheduleError and others from its rules
            first = first_line(err)
        kind = self.target.kind.name
        if kind != "llvm":  # the fallback below is the CPU tiling structure
            self.space_error = first
            return []
        rules = [_unfused_tiling() if type(r).__name__ == "MultiLevelTiling" else r
                 for r in ms.ScheduleRule.create(kind)]
        try:
            self.context = self._context(ms.space_generator.PostOrderApply(
                sch_rules=rules, postprocs=kind, mutator_probs=kind))
            spaces = list(self.context.generate_design_space())
        except Exception as err:
            self.context = self._context("post-order-apply")
            self.space_error = f"{first} (without epilogue fusion: {first_line(err)})"
            return []
        self.space_note = ("schedules tiled without epilogue fusion (expected for an epilogue that reads two "
                           "producers: TVM's default rules cannot fuse it)")
        return spaces

    def default(self) -> ScheduleCandidate:
        """The untuned default: the unscheduled kernel, empty trace."""
        return ScheduleCandidate(CandidateRecord(self.workload_hash, DEFAULT_TRACE_JSON), self.mod)

    def seeds(self) -> list[ScheduleCandidate]:
        """Register-blocked GEMM schedules of this kernel (:func:`tuner.templates.gemm_seeds`, the
        ``LEADING_SEEDS`` most promising first), after split-k ones where it is a GEMV on a
        row-major weight (:func:`tuner.space.gemv_seeds.split_k_seeds`, then the leading ones),
        else row-wise ones of a row-reduction kernel such as softmax
        (:func:`tuner.row_templates.row_seeds`) or of a fused attention kernel
        (:func:`tuner.attention_templates.attention_seeds`), or none. Built once per space."""
        if self._seeds is None:
            func = self.mod["main"]
            schedules = (split_k_seeds(func, self.target) + gemm_seeds(func, self.target)
                         or row_seeds(func, self.target) or attention_seeds(func, self.target))
            self._seeds = [ScheduleCandidate(CandidateRecord(self.workload_hash, trace_to_json(sch.trace)), sch.mod)
                           for sch in schedules]
        return list(self._seeds)

    def _spaces(self) -> list:
        if self._design_spaces is None:
            self._design_spaces = self._generate()
        return self._design_spaces

    def sample(self, n: int) -> list[ScheduleCandidate]:
        """Up to ``n`` distinct sampled schedules (fewer when the space is small).

        A kernel on which TVM's schedule rules fail has only its default schedule:
        the result is empty and ``space_error`` says why.
        """
        if not self._spaces():
            return []
        self.context.pre_tuning(max_trials=n, num_trials_per_iter=n, design_spaces=self._design_spaces)
        try:
            drawn = self.context.generate_measure_candidates() or []
        finally:
            self.context.post_tuning()
        unique: dict[str, ScheduleCandidate] = {}
        for cand in drawn:
            record = CandidateRecord(self.workload_hash, trace_to_json(cand.sch.trace))
            unique.setdefault(record.candidate_hash, ScheduleCandidate(record, cand.sch.mod))
        return list(unique.values())

    def mutate(self, parents: list[ScheduleCandidate], n: int) -> list[ScheduleCandidate]:
        """Up to ``n`` distinct schedules, each one mutation away from a parent.

        A mutator is drawn with the target's MetaSchedule probabilities for each
        attempt (at most ``4 * n``); untuned defaults and refused mutations give
        nothing. Parents are left out of the result. Seeded by the space's seed.
        """
        parents = [p for p in parents if not p.record.is_default]
        if n <= 0 or not parents or not self._spaces():
            return []
        generator = self.context.space_generator
        mutators = list(generator.mutator_probs.items())
        if not mutators:
            return []
        probs = np.array([float(p) for _, p in mutators])
        probs /= probs.sum()
        func = self.mod["main"]
        traces = [load_trace(func, p.record.trace_json) for p in parents]
        seen = {p.record.candidate_hash for p in parents}
        out: list[ScheduleCandidate] = []
        for _ in range(4 * n):
            trace = traces[int(self._rng.integers(len(parents)))]
            mutator = mutators[int(self._rng.choice(len(mutators), p=probs))][0]
            sch = mutate_trace(func, trace, mutator, generator.postprocs, int(self._rng.integers(1, 2**31 - 1)))
            if sch is None:
                continue
            record = CandidateRecord(self.workload_hash, trace_to_json(sch.trace))
            if record.candidate_hash not in seen:
                seen.add(record.candidate_hash)
                out.append(ScheduleCandidate(record, sch.mod))
                if len(out) == n:
                    break
        return out

    @staticmethod
    def mutable(candidate: ScheduleCandidate) -> bool:
        """Whether :meth:`mutate` can change ``candidate``: its trace has sampling decisions
        (a sampled schedule or a mutant; not the untuned default nor a seed, whose tiles are fixed)."""
        return bool(json.loads(candidate.record.trace_json)[1])

    def replay(self, record: CandidateRecord) -> ScheduleCandidate:
        """The scheduled module of a stored candidate of this kernel."""
        if record.is_default:
            return self.default()
        return ScheduleCandidate(record, apply_trace(self.mod["main"], record.trace_json))

    def features(self, candidates: list[ScheduleCandidate]):
        """TVM's per-store features of each candidate: a list of float32 arrays [n_stores, 164]."""
        measure = [ms.MeasureCandidate(Schedule(c.mod), self.args_info) for c in candidates]
        extractor = ms.feature_extractor.PerStoreFeature()
        return [f.numpy() for f in extractor.extract_from(self.context, measure)]

    def feature_matrix(self, candidates: list[ScheduleCandidate], workload: WorkloadRecord) -> np.ndarray:
        """The cost model's features of each candidate: float32 [len(candidates), N_FEATURES]
        (``tuner.cost_model.xgb.featurize`` of its per-store features, ``workload`` and trace)."""
        if not candidates:
            return np.zeros((0, N_FEATURES), np.float32)
        return np.stack([featurize(f, workload, c.record.trace_json)
                         for c, f in zip(candidates, self.features(candidates))])


def _unfused_tiling():
    """MetaSchedule's CPU multi-level tiling (``SSRSRS``, innermost factor at most 64) without write reuse."""
    return ms.schedule_rule.MultiLevelTiling(structure="SSRSRS", tile_binds=None, max_innermost_factor=64,
                                             vector_load_lens=None, reuse_read=None, reuse_write=None)

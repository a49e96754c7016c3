"""The search measures distinct programs: traces that schedule a kernel into the same loop nest count once."""

from __future__ import annotations

import pytest

from database import MeasureRecord, TargetRecord, canonical_json, open_database
from measure.tvmapi import make_target
from tuner.cost_model.node_prices import node_kernel
from tuner.search.search import ModelTrainer, SearchConfig, resume_state, tune_kernel
from tuner.space.space import ScheduleSpace

pytestmark = pytest.mark.slow  # tunes, builds or starts processes: left out of the fast tier


class _OfferingSpace(ScheduleSpace):
    """The real schedule space, remembering every candidate it offered the search."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.offered: list = []

    def sample(self, n):
        out = super().sample(n)
        self.offered += out
        return out

    def mutate(self, parents, n):
        out = super().mutate(parents, n)
        self.offered += out
        return out


def test_the_search_never_measures_one_program_twice():
    kernel = node_kernel("matmul", (1, 64), "float32", [(1, 64), (64, 64)])
    target = make_target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2})
    space = _OfferingSpace(kernel.func, kernel.workload.workload_hash, target)
    measured: list = []

    def measure(k, batch):
        # latencies are assigned, not measured: what is under test is which candidates the search sends
        measured.extend(batch)
        return [MeasureRecord(c.record.candidate_hash, k.workload.workload_hash, "t", "ok",
                              (1e-4 * (1 + 0.01 * len(measured) + 0.001 * i),) * 3) for i, c in enumerate(batch)]

    outcome = tune_kernel(kernel, space, {}, [], ModelTrainer(), measure, SearchConfig(trials=40, batch_size=8))
    offered = {c.record.candidate_hash: c.program_hash for c in space.offered}
    assert len(set(offered.values())) < len(offered), "premise: the space offered one program under two traces"
    programs = [c.program_hash for c in measured]
    assert len(programs) == len(set(programs)), "no program measured twice"
    assert len(measured) == 40 and outcome.stop_reason == "budget"


class _OneSampleSpace(ScheduleSpace):
    """The real schedule space offering one fixed sample and no seeds or mutants."""

    def __init__(self, *args, offer, **kwargs):
        super().__init__(*args, **kwargs)
        self.offer = offer

    def seeds(self):
        return []

    def sample(self, n):
        return [self.offer]

    def mutate(self, parents, n):
        return []


def test_a_resumed_search_does_not_measure_a_failed_program_again_under_another_trace(tmp_path):
    kernel = node_kernel("matmul", (1, 64), "float32", [(1, 64), (64, 64)])
    wh = kernel.workload.workload_hash
    target = make_target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2})
    space = ScheduleSpace(kernel.func, wh, target)
    by_program: dict = {}
    sampled = space.sample(16)
    for c in sampled + space.mutate([c for c in sampled if space.mutable(c)], 64):
        by_program.setdefault(c.program_hash, {})[c.record.candidate_hash] = c
    pair = next((list(cs.values())[:2] for cs in by_program.values() if len(cs) > 1), None)
    assert pair, "premise: the space offers one program under two traces"
    failed, twin = pair
    space = _OneSampleSpace(kernel.func, wh, target, offer=twin)
    sent: list = []

    def measure(k, batch):
        sent.extend(c.record.candidate_hash for c in batch)
        return [MeasureRecord(c.record.candidate_hash, wh, "t", "ok", (1e-4,) * 3) for c in batch]

    # the earlier run, as the database holds it: the failed candidate's build error
    target_rec = TargetRecord(canonical_json({"kind": "llvm"}), "local")
    db = open_database(f"sqlite:///{tmp_path}/tune.db")
    db.add_target(target_rec)
    db.add_workload(kernel.workload)
    db.add_candidates([failed.record])
    db.add_measure_results([MeasureRecord(failed.record.candidate_hash, wh, target_rec.target_hash, "build_error",
                                          error="x")])
    measured, history, discounted = resume_state(db, wh, target_rec.target_hash)
    db.close()
    assert (list(measured), history, discounted) == ([failed.record.candidate_hash], [], [failed.record])
    tune_kernel(kernel, space, dict(measured), history, ModelTrainer(), measure, SearchConfig(trials=8))
    assert twin.record.candidate_hash in sent, "premise: without knowing the failed program, its twin is measured"
    sent.clear()
    outcome = tune_kernel(kernel, space, dict(measured), history, ModelTrainer(), measure, SearchConfig(trials=8),
                          discounted=discounted)
    assert twin.record.candidate_hash not in sent
    assert space.default().record.candidate_hash in sent and outcome.stop_reason == "space_exhausted"

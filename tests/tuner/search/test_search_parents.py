"""The search's evolutionary step: mutants come from the fastest schedules a mutator can change."""

from __future__ import annotations

import pytest

from database import MeasureRecord
from measure.tvmapi import make_target
from tuner.cost_model.node_prices import node_kernel
from tuner.search.search import ModelTrainer, SearchConfig, tune_kernel
from tuner.space.space import ScheduleSpace

pytestmark = pytest.mark.slow  # tunes, builds or starts processes: left out of the fast tier


class _RecordingSpace(ScheduleSpace):
    """The real schedule space, remembering the parents each mutation step was given."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.parents: list[list] = []
        self.mutants: set[str] = set()

    def mutate(self, parents, n):
        self.parents.append(list(parents))
        out = super().mutate(parents, n)
        self.mutants.update(c.record.candidate_hash for c in out)
        return out


def test_mutants_come_from_sampled_schedules_when_the_seeds_are_fastest():
    # A [K, N] matmul, which gets register-blocked seeds. The latencies are assigned, not
    # measured: the seeds fastest, as on real GEMMs, so that the test decides the case
    # deterministically; what is under test is the choice of parents, not a measurement.
    kernel = node_kernel("matmul", (16, 64), "float32", [(16, 64), (64, 64)])
    target = make_target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2})
    space = _RecordingSpace(kernel.func, kernel.workload.workload_hash, target)
    seeds = {c.record.candidate_hash for c in space.seeds()}
    assert len(seeds) >= 4 and not any(space.mutable(c) for c in space.seeds())
    assert not space.mutable(space.default())
    sampled = space.sample(4)
    assert sampled and all(space.mutable(c) for c in sampled)

    measured_order: list[str] = []

    def measure(k, batch):
        records = []
        for i, cand in enumerate(batch):
            h = cand.record.candidate_hash
            latency = 1e-5 if h in seeds else 1e-3 if cand.record.is_default else 1e-4 * (1 + 0.01 * i)
            measured_order.append(h)
            records.append(MeasureRecord(h, k.workload.workload_hash, "t", "ok", (latency,) * 3))
        return records

    # Every pick beyond the leading seeds is drawn at random (explore=1) from a small pool (pool_factor=1),
    # of which mutants soon make up a third or more: which candidates a model would rank first among
    # these assigned latencies is not under test.
    config = SearchConfig(trials=24, batch_size=8, explore=1.0, pool_factor=1)
    tune_kernel(kernel, space, {}, [], ModelTrainer(), measure, config)
    given = [p for step in space.parents for p in step]
    assert given, "a mutation step ran with parents"
    assert all(space.mutable(p) for p in given), "no seed or default schedule is given as a parent"
    assert space.mutants & set(measured_order), "mutants of the sampled schedules were measured"

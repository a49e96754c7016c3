"""A search measures only what its workload's budget has left, whoever else is tuning it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from database import CandidateRecord, TargetRecord, canonical_json, open_database
from measure.tvmapi import make_target
from tuner.cost_model.node_prices import node_kernel
from tuner.search.measuring import BatchMeasurer
from tuner.search.search import ModelTrainer, SearchConfig, tune_kernel
from tuner.space.space import ScheduleSpace


class _Builder:
    """Builds nothing; counts the candidates it was asked to build."""

    def __init__(self):
        self.built = 0

    def build(self, mods):
        self.built += len(mods)
        return [SimpleNamespace(error=None, build_time_s=0.0, artifact_path="") for _ in mods]


class _Runner:
    worker_name = "fake"

    def run(self, builds, reference):
        return [SimpleNamespace(status="ok", times_s=(1e-4,) * 3, error="", worker="fake", retries=[])
                for _ in builds]


@pytest.fixture
def shared(tmp_path):
    """A kernel, its schedule space and a database where another live session holds claims on its workload."""
    kernel = node_kernel("matmul", (1, 64), "float32", [(1, 64), (64, 64)])
    wh = kernel.workload.workload_hash
    space = ScheduleSpace(kernel.func, wh, make_target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}))
    target = TargetRecord(canonical_json({"kind": "llvm"}), "local")
    db = open_database(f"sqlite:///{tmp_path}/tune.db")
    db.add_target(target)
    db.add_workload(kernel.workload)
    others = [CandidateRecord(wh, canonical_json([[f"elsewhere{i}"], []])) for i in range(3)]
    db.add_candidates(others)
    other = db.start_session({"job": "other"}, "other", "other-model")
    assert db.claim_candidates([c.candidate_hash for c in others], target.target_hash, other, trials=3)
    yield kernel, space, target, db
    db.close()


def _search(kernel, space, target, db, trials):
    session = db.start_session({"job": "this"}, "this", "this-model")
    builder = _Builder()
    measurer = BatchMeasurer(db, builder, _Runner(), target, session, lambda: None, trials=trials)
    outcome = tune_kernel(kernel, space, {}, [], ModelTrainer(), measurer.measure,
                          SearchConfig(trials=trials, batch_size=2, confirm_top=0))
    return outcome, builder


def test_a_search_stops_when_other_sessions_hold_the_budget(shared):
    kernel, space, target, db = shared
    outcome, builder = _search(kernel, space, target, db, trials=3)
    assert (outcome.stop_reason, outcome.measured_now, builder.built) == ("budget_taken", 0, 0)


def test_a_search_measures_only_what_other_sessions_left(shared):
    kernel, space, target, db = shared
    outcome, builder = _search(kernel, space, target, db, trials=7)
    assert (outcome.stop_reason, outcome.measured_now, builder.built) == ("budget_taken", 4, 4)
    assert db.trials_taken(kernel.workload.workload_hash, target.target_hash) == 7

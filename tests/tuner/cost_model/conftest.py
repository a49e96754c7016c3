"""A data set file of real kernels and real schedule traces (replayed and featurized by TVM) whose latencies are made
up, as a function of each candidate's hash, so no measurement is needed: the tests check the plumbing of the pretrained
model and of the held-out evaluation, not the model's quality."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from database import MeasureRecord, SessionStatus, open_database
from database.dataset_file import export_dataset
from tuner.cost_model.node_prices import node_kernel
from tuner.cost_model.xgb import FEATURE_VERSION
from tuner.space.space import ScheduleSpace
from tuner.target import resolve_target

TARGET = resolve_target('{"kind": "llvm", "num-cores": 2}')
SHAPES = ((8, 16, 32), (16, 32, 16), (32, 16, 8))  # (M, K, N) of out[M, N] = x[M, K] @ w[K, N]
#: the model and CPU of the session that measures each shape
SOURCES = (("llama-3.2-1b", "CPU A", "a"), ("qwen3-0.6b", "CPU B", "b"), ("qwen3-0.6b", "CPU B", "b"))


@pytest.fixture(scope="session")
def synthetic_dataset(tmp_path_factory):
    """Three matmul workloads (each its default, seeds and sampled schedules, three repeat times a measurement), the
    first measured in a Llama session on CPU A, the others in a Qwen3 session on CPU B.

    Returns ``path`` (the data set file), ``target`` (its ``ResolvedTarget``) and ``workloads`` (3)."""
    tmp = tmp_path_factory.mktemp("dataset")
    with open_database(f"sqlite:///{tmp / 'src.db'}") as db:
        db.add_target(TARGET.record)
        for (m, k, n), (model, cpu, llvm) in zip(SHAPES, SOURCES):
            session = db.start_session({"model": model, "stage": "prefill",
                                        "cpu": {"model_name": cpu, "llvm_cpu": llvm, "cores": 2}}, model, model)
            kernel = node_kernel("matmul", (m, n), "float32", [(m, k), (k, n)])
            wh = kernel.workload.workload_hash
            space = ScheduleSpace(kernel.func, wh, TARGET.target, seed=0)
            candidates = [space.default(), *space.seeds()[:2], *space.sample(5)]
            db.add_workload(kernel.workload)
            db.add_candidates([c.record for c in candidates])
            db.add_measure_results([MeasureRecord(
                c.record.candidate_hash, wh, TARGET.target_hash, "ok", session_id=session,
                times_s=tuple(1e-6 * (1 + int(c.record.candidate_hash[:4], 16) / 65536) * f for f in (1, 1.01, 0.99)))
                for c in candidates])
            db.finish_session(session, SessionStatus.FINISHED)
        path = tmp / "dataset.jsonl.gz"
        export_dataset(db, path, FEATURE_VERSION)
    return SimpleNamespace(path=path, target=TARGET, workloads=len(SHAPES))

"""Shared fixtures of the analysis, report and notebook tests: a database from a real short tuning run.

``tuned_db`` runs ``tune run`` once per test session on a tiny ONNX MLP (two
kernels, four trials each, real builds and a real local RPC tracker and worker);
``one_workload_db`` copies one of its workloads, with every measurement, into a
fresh database through the ``database`` API; ``empty_db`` is a database with the
schema and no rows.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

# Every `tune run` of the suite skips the peers (torch.compile, ONNX Runtime: about 25 s a run
# on 2 cores) unless it asks for them with --peers, as the first run of the prefill fixture of
# tests/tuner/test_tuner_e2e.py does; tests/tuner/test_peers.py builds and checks them directly.
os.environ.setdefault("TUNE_PEERS", "0")

TUNE_ARGS = ("--trials", "4", "--candidates", "1", "--repeat", "3", "--min-repeat-ms", "5", "--timeout", "300")


def write_mlp_onnx(path: Path) -> Path:
    """A two-layer MLP (x[8, 32] @ W1[32, 64] + b1, ReLU, @ W2[64, 32]) as an ONNX file."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((32, 64)).astype("float32"), "w1"),
        numpy_helper.from_array(rng.standard_normal(64).astype("float32"), "b1"),
        numpy_helper.from_array(rng.standard_normal((64, 32)).astype("float32"), "w2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 32])], weights,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.fixture
def mlp_onnx(tmp_path) -> Path:
    """A fresh :func:`write_mlp_onnx` model file in the test's temporary folder."""
    return write_mlp_onnx(tmp_path / "mlp.onnx")


@pytest.fixture(scope="session")
def tuned_db(tmp_path_factory) -> str:
    """URL of a SQLite database filled by one real ``tune run`` of a tiny ONNX MLP."""
    work = tmp_path_factory.mktemp("tuned")
    model = write_mlp_onnx(work / "mlp.onnx")
    url = f"sqlite:///{work / 'tune.db'}"
    proc = subprocess.run(
        [sys.executable, "-m", "tuner", "run", str(model), *TUNE_ARGS, "--db", url, "--json", "-q"],
        cwd=work, capture_output=True, text=True, timeout=1500,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["measured_trials"] > 0
    return url


@pytest.fixture(scope="session")
def empty_db(tmp_path_factory) -> str:
    """URL of a SQLite database with the tuning schema and no rows."""
    from database import open_database

    url = f"sqlite:///{tmp_path_factory.mktemp('empty') / 'tune.db'}"
    open_database(url).close()
    return url


def copy_workload(source_url: str, dest_url: str, workload_index: int = 0, session_source: str | None = None) -> str:
    """Copy one workload of ``source_url`` (a SQLite URL) with its target, candidates and measurements to ``dest_url``.

    Returns the copied workload's hash. Writes through ``database.Database``, so
    the copy is what a tuning run would have recorded; with ``session_source`` the
    measurements belong to a new session of that model source, else to none.
    """
    from database import (
        CandidateRecord,
        MeasureRecord,
        TargetRecord,
        WorkloadRecord,
        open_database,
    )

    src = sqlite3.connect(f"file:{source_url.removeprefix('sqlite:///')}?mode=ro", uri=True)
    hashes = [h for (h,) in src.execute(
        "SELECT DISTINCT w.workload_hash FROM measure_result m JOIN candidate c ON c.id = m.candidate_id "
        "JOIN workload w ON w.id = c.workload_id ORDER BY w.workload_hash")]
    wh = hashes[workload_index]
    workload = WorkloadRecord(*src.execute(
        "SELECT workload_hash, name, op_kind, script, shapes_json, flops, bytes_moved FROM workload "
        "WHERE workload_hash = ?", (wh,)).fetchone())
    rows = src.execute(
        "SELECT t.target_json, t.key, c.trace_json, m.status, m.times_s, m.build_time_s, m.error, m.worker "
        "FROM measure_result m JOIN candidate c ON c.id = m.candidate_id JOIN workload w ON w.id = c.workload_id "
        "JOIN target t ON t.id = m.target_id WHERE w.workload_hash = ? ORDER BY m.id", (wh,)).fetchall()
    src.close()
    with open_database(dest_url) as db:
        db.add_workload(workload)
        session = db.start_session({}, session_source, "copied") if session_source else None
        for target_json, key, trace, status, times, build_s, error, worker in rows:
            target, cand = TargetRecord(target_json, key), CandidateRecord(wh, trace)
            db.add_target(target)
            db.add_candidates([cand])
            db.add_measure_results([MeasureRecord(cand.candidate_hash, wh, target.target_hash, status,
                                                  tuple(json.loads(times)), build_s, error, worker, session)])
    return wh


@pytest.fixture(name="copy_workload", scope="session")
def copy_workload_fixture():
    """:func:`copy_workload`, for tests that copy a run's records to another backend."""
    return copy_workload


@pytest.fixture(scope="session")
def one_workload_db(tuned_db, tmp_path_factory) -> str:
    """URL of a SQLite database holding one workload of ``tuned_db`` and its measurements (no session, no model)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('one') / 'tune.db'}"
    copy_workload(tuned_db, url)
    return url


@pytest.fixture
def postgres_url():
    """URL of a private, empty PostgreSQL schema (skipped unless ``TUNE_TEST_POSTGRES_URL`` is set); dropped after."""
    import os

    from database.scratch import scratch_postgres_schema

    raw = os.environ.get("TUNE_TEST_POSTGRES_URL")
    if not raw:
        pytest.skip("set TUNE_TEST_POSTGRES_URL=postgresql+psycopg://USER@HOST:5432/DB to run the PostgreSQL tests")
    with scratch_postgres_schema(raw, "tune_analysis") as url:
        yield url

"""Real `tune run` processes on one database: killed with SIGKILL, and four at once.

Each run tunes a tiny ONNX model (one MatMul + Add, a single fused kernel) with a
handful of trials. Checks: a killed run leaves a consistent database and its
rerun resumes (nothing measured twice, the killed session `interrupted`); four
concurrent runs on overlapping models, measuring through one shared tracker and
worker, lose nothing, duplicate nothing and never measure a candidate twice on a
target, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import onnx
import psutil
import pytest
from onnx import TensorProto, helper, numpy_helper
from sqlalchemy import create_engine, text

from database.liveness import STALE_ENV
from database.scratch import scratch_postgres_schema
from measure import LocalRPC

pytestmark = pytest.mark.slow  # tunes, builds or starts processes: left out of the fast tier

TRIALS = 3
KILLED_TRIALS = 12  # enough that the kill lands mid-run even when measurements are fast and the poll is slow
STALE_S = 3.0
RUN_ARGS = ("--candidates", "1", "--batch-size", "1", "--repeat", "2", "--min-repeat-ms", "1",
            "--timeout", "300")


def write_matmul_add(path, m: int, k: int, n: int) -> str:
    """An ONNX model ``y = x @ w + b`` (x: m x k float32) written to ``path``."""
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    w = numpy_helper.from_array(rng.standard_normal((k, n)).astype("float32"), "w")
    b = numpy_helper.from_array(rng.standard_normal((n,)).astype("float32"), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])],
        "matmul_add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [w, b],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def start_run(model: str, db_url: str, cwd, trials: int = TRIALS, rpc: LocalRPC | None = None) -> subprocess.Popen:
    """A `tune run` process; through ``rpc``'s tracker and workers, or its own local ones."""
    env = {**os.environ, STALE_ENV: str(STALE_S)}
    through = ["--tracker", str(rpc.address), "--key", rpc.key] if rpc else []
    return subprocess.Popen(
        [sys.executable, "-m", "tuner", "run", model, *RUN_ARGS, "--trials", str(trials), "--db", db_url, "--json",
         "-q", *through,
         "--artifact-dir", str(cwd / "artifacts")],
        cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def finish(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=1800)
    assert proc.returncode == 0, err
    assert "locked" not in err, err
    return json.loads(out)


def query(db_url: str, sql: str) -> list[tuple]:
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(text(sql))]
    finally:
        engine.dispose()


DUPLICATES = """
    SELECT candidate_id, target_id, COUNT(*) FROM measure_result WHERE confirm = false
    GROUP BY candidate_id, target_id HAVING COUNT(*) > 1
"""  # candidates measured twice as trials (re-measurements of a kernel's leaders are not trials)


@pytest.fixture(params=["sqlite", "postgresql"])
def shared_url(request, tmp_path):
    """An empty database URL on each backend (PostgreSQL: a private schema, dropped after)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'tune.db'}"
        return
    raw = os.environ.get("TUNE_TEST_POSTGRES_URL")
    if not raw:
        pytest.skip("set TUNE_TEST_POSTGRES_URL=postgresql+psycopg://USER@HOST:5432/DB to run the PostgreSQL tests")
    with scratch_postgres_schema(raw, "tune_test") as url:
        yield url


@pytest.fixture(scope="module")
def shared_rpc():
    """One tracker and one worker that every concurrent run measures through, as a team's pool."""
    with LocalRPC(key="shared-pool") as rpc:
        yield rpc


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL a run, then the tracker, worker and build pool it started (their own sessions)."""
    if proc.poll() is not None:
        return
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for child in children:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass


def wait_for_first_measurement(proc: subprocess.Popen, db_path, deadline_s: float) -> None:
    """Poll the SQLite file until a measurement is recorded (fail if the run ends or time runs out)."""
    deadline = time.monotonic() + deadline_s
    while True:
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "no measurement recorded in time"
        time.sleep(0.5)
        if not db_path.exists():
            continue
        with sqlite3.connect(db_path, timeout=30) as con:
            try:
                if con.execute("SELECT COUNT(*) FROM measure_result").fetchone()[0]:
                    return
            except sqlite3.OperationalError:  # schema not created yet
                continue


def test_killed_run_leaves_a_consistent_database_and_the_rerun_resumes(tmp_path):
    model = write_matmul_add(tmp_path / "mm.onnx", 32, 64, 32)  # a space of more than KILLED_TRIALS schedules
    db_path = tmp_path / "tune.db"
    url = f"sqlite:///{db_path}"
    proc = start_run(model, url, tmp_path, KILLED_TRIALS)
    try:
        wait_for_first_measurement(proc, db_path, deadline_s=1500)
    finally:  # the crash: SIGKILL, no chance to clean up (or the test failed: end it all the same)
        kill_tree(proc)

    with sqlite3.connect(db_path) as con:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert con.execute("SELECT status FROM session").fetchall() == [("running",)]
        before = con.execute("SELECT COUNT(*) FROM measure_result").fetchone()[0]
    assert 1 <= before < KILLED_TRIALS

    time.sleep(STALE_S)  # the killed session's heartbeat goes stale
    summary = finish(start_run(model, url, tmp_path, KILLED_TRIALS))
    assert summary["measured_trials"] == KILLED_TRIALS - before  # nothing measured again
    assert query(url, "SELECT id, status FROM session ORDER BY id") == [(1, "interrupted"), (2, "finished")]
    assert query(url, DUPLICATES) == []
    assert query(url, "SELECT COUNT(DISTINCT candidate_id) FROM measure_result") == [(KILLED_TRIALS,)]


def test_four_concurrent_runs_share_one_database(shared_url, shared_rpc, tmp_path):
    a = write_matmul_add(tmp_path / "a.onnx", 8, 16, 8)
    b = write_matmul_add(tmp_path / "b.onnx", 16, 8, 16)
    procs = [start_run(model, shared_url, tmp_path, rpc=shared_rpc) for model in (a, b, a, b)]
    try:
        summaries = [finish(p) for p in procs]
    finally:
        for p in procs:
            kill_tree(p)

    assert query(shared_url, DUPLICATES) == []  # no candidate measured twice on the target
    recorded = query(shared_url, "SELECT session_id, COUNT(*) FROM measure_result WHERE confirm = false "
                                 "GROUP BY session_id")
    assert dict(recorded) == {s["session_id"]: s["measured_trials"] for s in summaries if s["measured_trials"]}
    assert query(shared_url, "SELECT DISTINCT status FROM session") == [("finished",)]
    per_workload = query(shared_url, """
        SELECT w.workload_hash, COUNT(DISTINCT m.candidate_id) FROM measure_result m
        JOIN candidate c ON c.id = m.candidate_id JOIN workload w ON w.id = c.workload_id
        GROUP BY w.workload_hash""")
    assert len(per_workload) == 2 and all(count >= TRIALS for _, count in per_workload)
    assert query(shared_url, "SELECT COUNT(*) FROM workload") == [(2,)]  # one row per kernel
    assert query(shared_url, "SELECT COUNT(*) FROM target") == [(1,)]
    unclaimed = query(shared_url, """
        SELECT COUNT(*) FROM measure_result m LEFT JOIN candidate_claim c
        ON c.candidate_id = m.candidate_id AND c.target_id = m.target_id
        WHERE c.measured_at IS NULL""")
    assert unclaimed == [(0,)]  # every measurement went through a claim

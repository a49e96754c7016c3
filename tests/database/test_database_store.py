"""Contract tests of the Database store, on every backend."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select, update

from database import DatabaseError, GraphCandidateRecord, ProgramTimingRecord, open_database
from database.models import TuningSession
from database.store import measure_stats


def test_keyed_inserts_are_idempotent(seeded, make):
    db, target, workload, candidates = seeded
    db.add_target(target)
    db.add_workload(workload)
    db.add_candidates(candidates + candidates[:2])
    stats = db.stats()
    assert (stats["target"], stats["workload"], stats["candidate"]) == (1, 1, 4)
    assert db.get_workload(workload.workload_hash) == workload
    assert db.get_workload("nope") is None


def test_candidate_of_unknown_workload_is_refused(db, make):
    with pytest.raises(DatabaseError, match="unknown workload w9-hash: add_workload first"):
        db.add_candidates([make.candidate(make.workload("w9"), 0)])


def test_measurements_are_append_only(seeded, make):
    db, target, _, candidates = seeded
    record = make.measure(candidates[0], target, times=(3e-3, 1e-3, 2e-3))
    db.add_measure_results([record])
    db.add_measure_results([record, record])
    assert db.stats()["measure_result"] == 3
    latest = db.measured_candidates(candidates[0].workload_hash, target.target_hash)
    assert latest == {candidates[0].candidate_hash: record}


def test_measure_batch_is_one_transaction(seeded, make):
    db, target, workload, candidates = seeded
    good = make.measure(candidates[0], target)
    unknown = make.measure(make.candidate(workload, 99), target)
    with pytest.raises(DatabaseError, match="unknown candidate"):
        db.add_measure_results([good, unknown])
    with pytest.raises(DatabaseError, match="unknown target"):
        db.add_measure_results([make.measure(candidates[0], make.target("cuda"))])
    assert db.stats()["measure_result"] == 0


def test_measure_stats():
    stats = measure_stats((3.0, 1.0, 2.0, 6.0))
    assert stats == {"median_s": 2.5, "mean_s": 3.0, "min_s": 1.0, "stdev_s": pytest.approx(2.160247)}
    assert measure_stats((2.0,))["stdev_s"] == 0.0
    assert set(measure_stats(()).values()) == {None}


def test_best_and_training_rows(seeded, make):
    db, target, workload, c = seeded
    db.add_measure_results(
        [
            make.measure(c[0], target, times=(5e-3,)),
            make.measure(c[1], target, times=(1e-3,)),  # fastest, but later wrong
            make.measure(c[2], target, times=(2e-3,)),
            make.measure(c[3], target, status="build_error"),
        ]
    )
    db.add_measure_results(
        [
            make.measure(c[1], target, status="wrong_result"),
            make.measure(c[0], target, times=(4e-3, 4e-3)),  # c0 measured again
        ]
    )
    best = db.best(workload.workload_hash, target.target_hash)
    assert best == (c[2], 2e-3)
    rows = db.training_rows(target.target_hash)
    assert {r.candidate_hash: (r.median_s, r.measurements) for r in rows} == {
        c[0].candidate_hash: (pytest.approx(4.5e-3), 2),  # the median of its two measurements' medians
        c[2].candidate_hash: (2e-3, 1),
    }
    assert all(r.workload_hash == workload.workload_hash for r in rows)
    assert {r.trace_json for r in rows} == {c[0].trace_json, c[2].trace_json}
    assert db.training_rows(target.target_hash, [workload.workload_hash]) == rows
    assert db.training_rows(target.target_hash, ["other"]) == []
    assert db.best("other", target.target_hash) is None


def test_a_candidate_measured_again_counts_with_the_median_of_its_measurements(seeded, make):
    db, target, workload, c = seeded
    db.add_measure_results([make.measure(c[0], target, times=(1.0e-3,)), make.measure(c[1], target, times=(2e-3,))])
    db.add_measure_results([make.measure(c[0], target, times=(1.1e-3,)), make.measure(c[0], target, status="timeout")])
    db.add_measure_results([make.measure(c[0], target, times=(9e-3,))])  # one unlucky measurement: outvoted
    wh, th = workload.workload_hash, target.target_hash
    assert db.best(wh, th) == (c[0], 1.1e-3)
    assert [(r.candidate_hash, r.median_s, r.measurements) for r in db.candidate_latencies(wh, th)] == [
        (c[0].candidate_hash, 1.1e-3, 3), (c[1].candidate_hash, 2e-3, 1)]
    assert [r.candidate_hash for r in db.candidate_latencies(wh, th, limit=1)] == [c[0].candidate_hash]
    assert {r.candidate_hash: r.median_s for r in db.training_rows(th)} == {
        c[0].candidate_hash: 1.1e-3, c[1].candidate_hash: 2e-3}
    db.add_measure_results([make.measure(c[0], target, status="wrong_result")])
    assert db.best(wh, th) == (c[1], 2e-3)
    assert db.candidate_latencies("other", th) == [] and db.candidate_latencies(wh, "other") == []


def test_a_failed_re_measurement_rules_a_candidate_out(seeded, make):
    db, target, workload, c = seeded
    wh, th = workload.workload_hash, target.target_hash
    db.add_measure_results([make.measure(c[0], target, times=(1e-3,)), make.measure(c[1], target, times=(2e-3,)),
                            make.measure(c[2], target, times=(3e-3,))])
    db.add_measure_results([make.measure(c[0], target, status="timeout", confirm=True),
                            make.measure(c[1], target, status="worker_lost", confirm=True),  # the worker's fault
                            make.measure(c[1], target, times=(2.2e-3,), confirm=True)])
    assert [(r.candidate_hash, r.measurements) for r in db.candidate_latencies(wh, th)] == [
        (c[1].candidate_hash, 2), (c[2].candidate_hash, 1)]
    assert db.best(wh, th) == (c[1], pytest.approx(2.1e-3))
    # resuming a search sees each candidate's newest trial, not its re-measurements
    assert {h: r.median_s for h, r in db.measured_candidates(wh, th).items()} == {
        c[0].candidate_hash: 1e-3, c[1].candidate_hash: 2e-3, c[2].candidate_hash: 3e-3}


def test_training_rows_filter_by_workload(seeded, make):
    db, target, w1, c = seeded
    w2 = make.workload("w2")
    db.add_workload(w2)
    c2 = make.candidate(w2, 0)
    db.add_candidates([c2])
    db.add_measure_results([make.measure(c[0], target), make.measure(c2, target, times=(7e-3,))])
    rows = db.training_rows(target.target_hash, [w2.workload_hash])
    assert [(r.workload_hash, r.median_s) for r in rows] == [(w2.workload_hash, 7e-3)]
    assert len(db.training_rows(target.target_hash)) == 2


def test_resume_sees_latest_of_any_status(seeded, make):
    db, target, workload, c = seeded
    session = db.start_session({"trials": 8}, "hf:tiny", "model-hash")
    first = make.measure(c[0], target, times=(1e-3,), session_id=session, worker="local/0")
    timeout = make.measure(c[0], target, status="timeout", session_id=session, build_time_s=1.5)
    other = make.measure(c[1], target, status="run_error")
    db.add_measure_results([first])
    db.add_measure_results([timeout, other])
    done = db.measured_candidates(workload.workload_hash, target.target_hash)
    assert done == {c[0].candidate_hash: timeout, c[1].candidate_hash: other}
    assert db.measured_candidates("other", target.target_hash) == {}
    assert db.session_trials(session) == 2


def test_candidate_traces_of_a_workload(seeded, make):
    db, _, workload, c = seeded
    other = make.workload("w2")
    db.add_workload(other)
    db.add_candidates([make.candidate(other, 7)])
    hashes = [c[0].candidate_hash, c[2].candidate_hash, make.candidate(other, 7).candidate_hash, "unknown"]
    traces = db.candidate_traces(workload.workload_hash, hashes)
    assert traces == {c[0].candidate_hash: c[0].trace_json, c[2].candidate_hash: c[2].trace_json}
    assert db.candidate_traces(workload.workload_hash, []) == {}


def test_target_isolation(seeded, make):
    db, cpu, workload, c = seeded
    gpu = make.target("cuda", key="h200")
    cpu_other_key = make.target("llvm", key="other-pool")
    db.add_target(gpu)
    db.add_target(cpu_other_key)
    db.add_measure_results([make.measure(c[0], cpu, times=(1e-3,))])
    db.save_cost_model(cpu.target_hash, "v1", b"cpu-model", 1, {})
    for other in (gpu, cpu_other_key):
        assert db.best(workload.workload_hash, other.target_hash) is None
        assert db.training_rows(other.target_hash) == []
        assert db.measured_candidates(workload.workload_hash, other.target_hash) == {}
        assert db.latest_cost_model(other.target_hash, "v1") is None
    db.add_measure_results([make.measure(c[1], gpu, times=(9e-3,))])
    assert db.best(workload.workload_hash, cpu.target_hash) == (c[0], 1e-3)
    assert db.best(workload.workload_hash, gpu.target_hash) == (c[1], 9e-3)
    assert db.best(workload.workload_hash, "unknown-target") is None


def _session_status(db, session_id):
    with db._engine.connect() as conn:
        return conn.scalar(select(TuningSession.status).where(TuningSession.id == session_id))


def test_session_lifecycle(db):
    old = db.start_session({"model": "x", "path": object()}, "hf:tiny", "m1")
    fresh = db.start_session({}, "hf:tiny", "m1", code_version="test")
    db.heartbeat(fresh)
    # the old session last beat two hours ago (no sleep: a loaded machine can't flake it)
    with db._engine.begin() as conn:
        beat = conn.scalar(select(TuningSession.heartbeat_at).where(TuningSession.id == old))
        conn.execute(update(TuningSession).where(TuningSession.id == old)
                     .values(heartbeat_at=beat - timedelta(hours=2)))
    assert db.mark_stale_sessions_interrupted(older_than_s=3 * 3600) == 0
    assert db.mark_stale_sessions_interrupted(older_than_s=3600) == 1
    assert _session_status(db, old) == "interrupted"
    assert _session_status(db, fresh) == "running"
    db.finish_session(fresh, "finished")
    assert _session_status(db, fresh) == "finished"
    with pytest.raises(ValueError):
        db.finish_session(fresh, "running")
    with pytest.raises(DatabaseError, match="no tuning session"):
        db.heartbeat(12345)


def test_cost_model_versions(seeded):
    db, target, _, _ = seeded
    booster = bytes(range(256)) * 4
    first = db.save_cost_model(target.target_hash, "v1", b"old", 10, {"top1": 0.5})
    second = db.save_cost_model(target.target_hash, "v1", booster, 20, {"top1": 0.9})
    assert second > first
    assert db.latest_cost_model(target.target_hash, "v1") == (booster, {"top1": 0.9})
    assert db.latest_cost_model(target.target_hash, "v2") is None
    with pytest.raises(DatabaseError, match="unknown target"):
        db.save_cost_model("nope", "v1", b"x", 1, {})


def test_graph_candidates(db):
    graph = GraphCandidateRecord("model", "(matmul a b)", ("w1", "w2"), predicted_latency_s=1e-3)
    db.add_graph_candidate(graph)
    db.add_graph_candidate(graph)
    assert db.stats()["graph_candidate"] == 1
    db.update_graph_latency(graph.graph_hash, measured=2e-3)
    db.update_graph_latency(graph.graph_hash)
    with pytest.raises(DatabaseError, match="unknown graph candidate"):
        db.update_graph_latency("nope", predicted=1.0)


def test_program_timings_newest_per_model_target_and_program(db, make):
    llvm, other = make.target(), make.target("cuda")
    db.add_target(llvm)
    db.add_target(other)
    session = db.start_session({}, "m", "model")
    assert db.program_timing("model", llvm.target_hash, "tvm_default") is None
    db.add_program_timing(ProgramTimingRecord("model", llvm.target_hash, "tvm_default", (3.0, 1.0, 2.0), session))
    db.add_program_timing(ProgramTimingRecord("model", llvm.target_hash, "tvm_default", (5.0,), None))
    db.add_program_timing(ProgramTimingRecord("model", other.target_hash, "tvm_default", (9.0,), session))
    newest = db.program_timing("model", llvm.target_hash, "tvm_default")
    assert (newest.times_s, newest.median_s, newest.session_id) == ((5.0,), 5.0, None)
    assert db.program_timing("model", other.target_hash, "tvm_default").median_s == 9.0
    assert db.program_timing("other-model", llvm.target_hash, "tvm_default") is None
    assert db.program_timing("model", llvm.target_hash, "torch_eager") is None
    assert ProgramTimingRecord("m", "t", "p", (3.0, 1.0, 2.0)).median_s == 2.0
    with pytest.raises(DatabaseError, match="unknown target"):
        db.add_program_timing(ProgramTimingRecord("model", "nope", "tvm_default", (1.0,)))
    with pytest.raises(DatabaseError, match="no times"):
        db.add_program_timing(ProgramTimingRecord("model", llvm.target_hash, "tvm_default", ()))


def test_concurrent_writers(db_url, make):
    """Several connections create the schema and append at once without losing rows."""
    target, workload = make.target(), make.workload()
    candidates = [make.candidate(workload, i) for i in range(4)]

    def worker(i):
        with open_database(db_url) as db:
            db.add_target(target)
            db.add_workload(workload)
            db.add_candidates(candidates)
            for _ in range(5):
                db.add_measure_results([make.measure(candidates[i], target)])

    make.in_threads(worker, 4)
    with open_database(db_url) as db:
        assert db.stats()["measure_result"] == 20
        assert db.stats()["candidate"] == 4


def test_foreign_keys_are_enforced(seeded, make):
    db, target, _, c = seeded
    with pytest.raises(DatabaseError, match="(?i)foreign key"):
        db.add_measure_results([make.measure(c[0], target, session_id=999)])
    assert db.stats()["measure_result"] == 0


def test_measurement_workload_must_match_candidate(seeded, make):
    db, target, _, c = seeded
    w2 = make.workload("w2")
    db.add_workload(w2)
    wrong = make.measure(c[0], target)
    wrong = type(wrong)(**{**wrong.__dict__, "workload_hash": w2.workload_hash})
    with pytest.raises(DatabaseError, match="belongs to"):
        db.add_measure_results([wrong])

"""`tune db stats` and `tune db best`, in text and --json, on every backend."""

from __future__ import annotations

import json

import pytest
from sqlalchemy.engine import make_url
from typer.testing import CliRunner

from database import GraphCandidateRecord, open_database
from tuner.cli import app

runner = CliRunner()


def tune_db(*args: str):
    return runner.invoke(app, ["db", *args])


def _fill(db, make):
    """Two workloads of one model, three candidates each, on one target; one other target."""
    target, other = make.target(), make.target("cuda", key="gpu")
    db.add_target(target)
    db.add_target(other)
    session = db.start_session({}, "tiny.onnx", "model-hash")
    workloads = [make.workload("w1"), make.workload("w2")]
    for w in workloads:
        db.add_workload(w)
    db.add_graph_candidate(GraphCandidateRecord("model-hash", "(term)", tuple(w.workload_hash for w in workloads)))
    for w, base in zip(workloads, (1e-3, 2e-3)):
        candidates = [make.candidate(w, i) for i in range(3)]
        db.add_candidates(candidates)
        db.add_measure_results([
            make.measure(candidates[0], target, times=(base * 2,), session_id=session),
            make.measure(candidates[1], target, times=(base,), session_id=session),
            make.measure(candidates[2], target, status="build_error", session_id=session),
        ])
    return target, workloads, session


def test_stats_json(db_url, db, make):
    _fill(db, make)
    result = tune_db("stats", "--db", db_url, "--json")
    assert result.exit_code == 0, result.output
    stats = json.loads(result.output)
    assert stats["rows"]["measure_result"] == 6
    assert stats["rows"]["candidate_claim"] == 0
    assert stats["rows"]["workload"] == 2


def test_best_by_model_and_by_workload(db_url, db, make):
    target, workloads, _ = _fill(db, make)
    for how in (["--model", "tiny.onnx"], ["--model", "model-hash"]):
        result = tune_db("best", "--db", db_url, "--json", *how)
        assert result.exit_code == 0, result.output
        rows = json.loads(result.output)["best"]
        assert [(r["workload_hash"], r["median_s"], r["trials"], r["key"]) for r in rows] == [
            (workloads[0].workload_hash, 1e-3, 3, target.key),
            (workloads[1].workload_hash, 2e-3, 3, target.key),
        ]  # the other target measured nothing: no row
        assert rows[0]["gflops"] == workloads[0].flops / 1e-3 / 1e9
    result = tune_db("best", "--db", db_url, "--workload", "w2")
    assert result.exit_code == 0, result.output
    assert "fused_w2" in result.output and "fused_w1" not in result.output
    assert "2000.00 us" in result.output


def test_best_by_the_model_name_given_to_tune_run(db_url, db, make):
    target, workloads, _ = _fill(db, make)
    other = db.start_session({}, "qwen3-0.6b prefill seq_len=128 layers=1", "model-hash")
    db.finish_session(other)
    for how in ("qwen3-0.6b", "qwen3-0.6b prefill seq_len=128 layers=1"):
        result = tune_db("best", "--db", db_url, "--json", "--model", how)
        assert result.exit_code == 0, result.output
        assert len(json.loads(result.output)["best"]) == 2
    assert tune_db("best", "--db", db_url, "--model", "qwen3").exit_code == 1  # a prefix of the name is not the name


def test_best_needs_a_selection_and_a_match(db_url, db, make):
    _fill(db, make)
    assert tune_db("best", "--db", db_url).exit_code == 1
    result = tune_db("best", "--db", db_url, "--model", "no-such-model")
    assert result.exit_code == 1
    assert "no model matches --model no-such-model; known models: tiny.onnx (model-hash)" in result.output


def test_credentials_in_the_query_string_are_never_printed(db_url, db):
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite takes no password")
    url = make_url(db_url).update_query_dict({"password": "SECRETPW"}).render_as_string(hide_password=False)
    for args in (("stats",), ("stats", "--json"), ("upgrade",)):
        result = tune_db(*args, "--db", url)
        assert result.exit_code == 0, result.output
        assert "SECRETPW" not in result.output
        assert args[0] == "upgrade" or "password=***" in result.output
    with open_database(url) as database:  # the line `tune run` prints
        assert "SECRETPW" not in database.url_display

"""End to end: `tune run` on a tiny Qwen3 layer with real RPC workers, a real database, real builds."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys

import pytest

from database import open_database
from extract import load_model
from measure.tvmapi import make_target
from tuner.kernels import kernels_of, lower_to_kernels
from tuner.search.confirm import MARGIN
from tuner.space.space import ScheduleSpace

pytestmark = pytest.mark.slow  # tunes, builds or starts processes: left out of the fast tier


def tune_json(*args: str, cwd) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "tuner", "run", *args, "--json", "-q"],
        cwd=cwd, capture_output=True, text=True, timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "", proc.stderr  # -q: nothing but errors
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def prefill_runs(tmp_path_factory):
    """The same prefill job twice on one database."""
    work = tmp_path_factory.mktemp("prefill")
    args = ("qwen3-tiny", "--stage", "prefill", "--seq-len", "8", "--trials", "2", "--db", f"sqlite:///{work}/tune.db")
    first = tune_json(*args, "--peers", cwd=work)
    second = tune_json(*args, cwd=work)
    return work, first, second


def test_summary_has_every_figure(prefill_runs):
    _, summary, _ = prefill_runs
    assert {"session_id", "kernels", "latency_s", "measured_trials"} <= summary.keys()
    for name in ("tuned", "tvm_default", "torch_eager"):
        assert summary["latency_s"][name] > 0
    assert summary["measured_trials"] > 0
    assert summary["kernels"], "the chosen program has kernels"
    for kernel in summary["kernels"]:
        assert kernel["latency_s"] > 0 and not kernel["predicted"]
        # the untuned default is always measured, so the best is never slower than it
        assert kernel["default_latency_s"] is not None
        assert kernel["latency_s"] <= kernel["default_latency_s"]
    assert summary["max_abs_error"] < 1e-3
    assert os.path.exists(summary["artifact"])
    load = summary["load_average"]
    assert load["cpus"] >= 1 and load["tuning_max"] >= 0 and load["timing"] >= 0
    # the peers a user would pick instead, checked then timed in processes of their own
    assert {p["name"]: p["status"] for p in summary["peers"]} == {"torch_compile": "ok", "onnxruntime": "ok"}
    for name in ("torch_compile", "onnxruntime"):
        assert summary["latency_s"][name] > 0


def test_egraph_rewrites_fire_and_candidates_are_checked(prefill_runs):
    _, summary, _ = prefill_runs
    fired = summary["saturation"]["rules_fired"]
    for family in ("transpose_fold", "merge_qkv", "merge_pair", "epilogue_silu_mul", "epilogue_add"):
        assert fired.get(family, 0) > 0, (family, fired)
    assert summary["saturation"]["stop_reason"]
    checked = [c for c in summary["candidates"] if "max_abs_error" in c]
    assert len(checked) >= 2 and all(c["max_abs_error"] < 1e-3 for c in checked)


def test_the_cheapest_programs_are_timed_and_the_fastest_kept(prefill_runs):
    _, summary, _ = prefill_runs
    timed = summary["programs_timed"]
    assert len(timed) == 2  # --measure-top defaults to 2
    predicted = [t["predicted_latency_s"] for t in timed]
    assert predicted == sorted(predicted), "the cheapest by price are the ones timed"
    fastest = min(timed, key=lambda t: t["measured_latency_s"])
    assert summary["graph"]["term_hash"] == fastest["term_hash"]
    assert summary["latency_s"]["tuned"] == fastest["measured_latency_s"]
    ours = [a for a in os.listdir(os.path.dirname(summary["artifact"]))
            if f"-s{summary['session_id']}-" in a and not a.endswith("-tvm-default.so")]
    assert ours == [os.path.basename(summary["artifact"])], "the slower program's library is removed"


def test_database_holds_the_run(prefill_runs):
    work, summary, second = prefill_runs
    db = open_database(f"sqlite:///{work}/tune.db")
    stats = db.stats()
    (target,) = db.targets()
    measured = {r.candidate_hash for r, _ in db.measure_results(target.target_hash)}
    db.close()
    assert stats["session"] == 2
    assert stats["workload"] >= len(summary["kernels"])
    assert stats["candidate"] >= stats["workload"]
    assert second["measured_trials"] == second["confirm_measurements"] == 0
    assert summary["confirm_measurements"] > 0
    assert stats["measure_result"] == summary["measured_trials"] + summary["confirm_measurements"]
    # each kernel's leaders (up to 3) within 1.25x of its fastest were measured three times in all; one further
    # behind was measured once, or three times if it was within 1.25x of a leader that then fell back
    db = open_database(f"sqlite:///{work}/tune.db")
    leaders = [db.candidate_latencies(k["workload_hash"], target.target_hash, 3) for k in summary["kernels"]]
    db.close()
    assert all(rows and all(r.measurements == 3 for r in rows if r.median_s <= MARGIN * rows[0].median_s)
               for rows in leaders), leaders
    assert {r.measurements for rows in leaders for r in rows} <= {1, 3}, leaders
    # after the untuned default, a GEMM's first trial is its first register-blocked seed
    model = load_model("qwen3-tiny", stage="prefill", seq_len=8)
    spaces = [ScheduleSpace(k.func, k.workload.workload_hash, make_target(json.loads(target.target_json)))
              for k in kernels_of(lower_to_kernels(model.mod)) if k.workload.op_kind == "matmul"]
    seeded = [s for s in spaces if s.default().record.candidate_hash in measured and s.seeds()]
    assert seeded and all(s.seeds()[0].record.candidate_hash in measured for s in seeded)


def _second_session_diagnosis(work, first: dict, second: dict) -> str:
    """What the second run measured, per workload, beside what the first recorded there."""
    with sqlite3.connect(work / "tune.db") as conn:
        rows = conn.execute(
            "SELECT w.name, w.op_kind, m.session_id, m.status, c.candidate_hash FROM measure_result m "
            "JOIN candidate c ON c.id = m.candidate_id JOIN workload w ON w.id = c.workload_id "
            "WHERE w.id IN (SELECT c2.workload_id FROM measure_result m2 JOIN candidate c2 "
            "ON c2.id = m2.candidate_id WHERE m2.session_id = 2) ORDER BY w.id, m.id").fetchall()
    candidates = [[(c["term_hash"][:10], c.get("error")) for c in s["candidates"]] for s in (first, second)]
    return f"candidates first/second: {candidates}; measurements of the workloads measured again: {rows}"


def test_second_run_measures_nothing_and_times_the_same_programs(prefill_runs):
    work, first, second = prefill_runs
    assert second["measured_trials"] == 0, _second_session_diagnosis(work, first, second)
    # nothing new measured: the same prices, so the same cheapest programs are timed end to end
    # (which of them is fastest is a fresh, noisy measurement)
    priced = [(t["term_hash"], t["predicted_latency_s"]) for t in first["programs_timed"]]
    assert [(t["term_hash"], t["predicted_latency_s"]) for t in second["programs_timed"]] == priced
    assert second["graph"]["term_hash"] in {h for h, _ in priced}


def test_a_rerun_reuses_the_default_builds_timing_unless_told_to_time_it_again(prefill_runs, tmp_path):
    work, first, second = prefill_runs
    assert first["tvm_default"] == {"session_id": first["session_id"], "reused": False}
    assert second["tvm_default"] == {"session_id": first["session_id"], "reused": True}
    assert second["latency_s"]["tvm_default"] == first["latency_s"]["tvm_default"]
    # the rerun neither built nor timed it: no library of its own, no timing recorded
    built = sorted(p.name for p in (work / "tune-artifacts").glob("*-tvm-default.so"))
    assert built == [f"qwen3-tiny-prefill-seq-len-8-layers-1-s{first['session_id']}-tvm-default.so"]

    def timings(path) -> list[int]:
        with sqlite3.connect(path) as conn:
            return [r[0] for r in conn.execute("SELECT session_id FROM program_timing ORDER BY id")]

    assert timings(work / "tune.db") == [first["session_id"]]
    shutil.copy(work / "tune.db", tmp_path / "tune.db")  # the other tests' database stays as the two runs left it
    again = tune_json("qwen3-tiny", "--stage", "prefill", "--seq-len", "8", "--trials", "0", "--measure-top", "1",
                      "--retime-default", "--db", f"sqlite:///{tmp_path}/tune.db", cwd=tmp_path)
    assert again["tvm_default"] == {"session_id": again["session_id"], "reused": False}
    assert again["latency_s"]["tvm_default"] > 0
    assert timings(tmp_path / "tune.db") == [first["session_id"], again["session_id"]]


def test_later_compile_with_no_trials_compiles_the_cost_models_picks(prefill_runs):
    # new shapes (16 tokens) on the database of the runs above: nothing is measured; each new
    # kernel is compiled with the schedule the stored cost model predicts fastest
    work, _, _ = prefill_runs
    summary = tune_json("qwen3-tiny", "--stage", "prefill", "--seq-len", "16", "--trials", "0",
                        "--db", f"sqlite:///{work}/tune.db", cwd=work)
    assert summary["measured_trials"] == 0
    sources = [k["source"] for k in summary["kernels"]]
    assert "predicted" in sources, sources
    assert all(k["latency_s"] > 0 and k["predicted"] == (k["source"] != "measured") for k in summary["kernels"])
    assert summary["latency_s"]["tuned"] > 0
    assert summary["max_abs_error"] < 1e-3


def test_decode_with_kv_cache_and_a_repriced_extraction(tmp_path):
    summary = tune_json(
        "qwen3-tiny", "--stage", "decode", "--kv-len", "16", "--trials", "1", "--candidates", "2", "--reprice",
        "--no-peers", "--db", f"sqlite:///{tmp_path}/tune.db", cwd=tmp_path,
    )
    assert summary["stage"] == "decode"
    assert summary["peers"] == [] and summary["latency_s"]["torch_compile"] is None  # --no-peers
    for name in ("tuned", "tvm_default", "torch_eager"):
        assert summary["latency_s"][name] > 0
    assert summary["max_abs_error"] < 1e-3
    # --reprice: the e-graph is extracted again with GEMM-like e-nodes priced by their tuned kernels
    repriced = summary["repriced"]
    assert repriced["priced"] > 0, repriced
    checked = {c["term_hash"]: c for c in summary["candidates"]}
    if repriced["new"]:  # a new program is checked like every candidate, then tuned and priced
        assert repriced["added"] and checked[repriced["term_hash"]]["max_abs_error"] < 1e-3

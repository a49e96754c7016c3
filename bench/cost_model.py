"""Benchmark 4: the cost model's held-out-workload ranking metrics against TenSet's published XGBoost figures.

Runs ``tune model eval --json`` on the warm database the sample-efficiency
benchmark leaves in the suite's work directory (real measurements of several
Qwen3 kernels by our tuner), and reads the product's default objective
(``tuner.cost_model.xgb.DEFAULT_OBJECTIVE``). The anchor figures are TenSet's
XGBoost model as published (Zheng et al., "TenSet: A Large-scale Program
Performance Dataset for Learned Tensor Compilers", NeurIPS Datasets and
Benchmarks 2021): top-1 0.829, top-5 0.905, pairwise accuracy 0.846, on its own
dataset, not on ours. The goals are the cost-model issue's: top-1 >= 0.90,
top-5 >= 0.95, pairwise >= 0.87.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from .common import BenchResult, Row

NAME = "cost_model"
TENSET = {"top1": 0.829, "top5": 0.905, "pairwise": 0.846}
GOALS = {"top1": 0.90, "top5": 0.95, "pairwise": 0.87}
WARM_DB = "warm.db"  # what bench.sample_efficiency leaves in BENCH_WORK_DIR


def run(work_dir: str, quick: bool = False, title: str = "Cost model", timeout_s: float = 3600.0) -> BenchResult:
    """Evaluate on ``work_dir/warm.db``; "not run" when that database is missing or the command fails or times out."""
    from tuner.cost_model.xgb import DEFAULT_OBJECTIVE

    db_path = os.path.join(work_dir, WARM_DB)
    tune = [sys.executable, "-m", "tuner", "model", "eval", "--json", "--db", f"sqlite:///{db_path}"]
    shown = "tune model eval --json --db sqlite:///<sample-efficiency warm.db>"
    if not os.path.exists(db_path):
        return BenchResult.not_run(NAME, title, "needs the database of the sample-efficiency benchmark, which did "
                                   "not run or left none.", shown)
    start = time.time()
    try:
        proc = subprocess.run(tune, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return BenchResult.not_run(NAME, title, f"`tune model eval` stopped after its limit of {timeout_s:.0f} s.",
                                   shown)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return BenchResult.not_run(NAME, title, f"`tune model eval` failed: {tail[0]}", shown)
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    ours_name = f"xgb:{DEFAULT_OBJECTIVE}"
    ours = data["models"].get(ours_name, {})
    rows = []
    for metric, label in (("top1", "top-1 score"), ("top5", "top-5 score"), ("pairwise", "pairwise accuracy")):
        value = ours.get(metric)
        rows.append(Row(f"{label} ({ours_name})", value, TENSET[metric], "TenSet XGBoost (published)",
                        value / TENSET[metric] if value is not None else None, f"ours >= {GOALS[metric]}",
                        None if value is None else value >= GOALS[metric]))
    rows.append(Row(f"Spearman ({ours_name})", ours.get("spearman"), None, "(TenSet publishes none)", None,
                    "(reported, no goal)", None))
    intervals = ours.get("interval") or {}
    bounds = "; ".join(f"{m} {_bounds(intervals.get(m))}" for m in GOALS)
    others = "; ".join(f"{m}: top-1 {r.get('top1', float('nan')):.3f}, pairwise "
                       f"{(r.get('pairwise') or float('nan')):.3f}"
                       for m, r in data["models"].items() if m != ours_name)
    notes = [
        f"{data['records']} measured candidates of {data['workloads']} workloads ({data.get('skipped', 0)} skipped), "
        "whole workloads held out (scikit-learn grouped splits).",
        "TenSet's figures are on TenSet's dataset; ours are on this run's Qwen3 kernels, so the ratio compares "
        "levels, not the same data." + (" Quick mode: very few records, the figures mean little." if quick else ""),
        f"{ours_name}'s 95% bootstrap intervals over workloads (how far each mean could move with other "
        f"workloads): {bounds}.",
        f"Other models on the same splits: {others}.",
    ]
    return BenchResult(NAME, title, rows=rows, notes=notes, plot={"kind": "ratios"}, command=shown,
                       seconds=time.time() - start)


def _bounds(interval: list[float] | None) -> str:
    """``[0.750, 0.899]``, or ``none`` where too few workloads were judged for an interval."""
    return "none" if interval is None else f"[{interval[0]:.3f}, {interval[1]:.3f}]"


if __name__ == "__main__":
    sys.exit("bench.cost_model has no script of its own: `python -m bench` runs it on the database the "
             "sample-efficiency benchmark leaves")

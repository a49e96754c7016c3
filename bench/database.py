"""Benchmark: the tuner's database queries over 1,000,000 measure results.

Fills a scratch database (a SQLite file in a temporary directory; a PostgreSQL
schema created and dropped in the database named by ``--postgres`` or
``TUNE_TEST_POSTGRES_URL``) with synthetic but realistic records, then times the
queries a tuning run makes, reporting the median (and min/max) over repeats:

- ``best``: the best candidate of one workload on one target (``Database.best``);
- ``measured``: every candidate of one workload measured on one target, for
  resuming a search (``Database.measured_candidates``);
- ``history``: one workload's training rows on one target (``Database.training_rows``
  with one workload, what the search learns before its first batch);
- ``training_set``: every training row of one target (``Database.training_rows``),
  the cost model's full training set.

Synthetic data: ``--workloads`` kernels, each with ``--candidates`` schedules
measured once on each of two targets (1,000,000 rows by default); 88% ``ok``,
the rest build errors, run errors, timeouts and 1% wrong results; five repeat
times per ok row, log-normal around a per-workload base latency.

Usage: ``python -m bench.database [--quick] [--workloads 500] [--candidates 1000] [--repeats 20] [--json]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

# Run as a script, this file's directory comes first on sys.path and its name
# would shadow the ``database`` package it measures.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import numpy as np  # noqa: E402

from bench.common import bench_parser, positive_int  # noqa: E402
from database import (  # noqa: E402
    MeasureStatus,
    TargetRecord,
    canonical_json,
    open_database,
    sha256_text,
)
from database.bulk import bulk_insert  # noqa: E402
from database.scratch import scratch_postgres_schema  # noqa: E402
from database.store import measure_stats  # noqa: E402

STATUSES = ([MeasureStatus.OK] * 88 + [MeasureStatus.BUILD_ERROR] * 5 + [MeasureStatus.RUN_ERROR] * 3
            + [MeasureStatus.TIMEOUT] * 3 + [MeasureStatus.WRONG_RESULT])


def synthetic(n_workloads: int, n_candidates: int, seed: int = 0):
    """Rows for the workload, candidate, target and measure_result tables (ids from 1)."""
    rng = np.random.default_rng(seed)
    targets = [TargetRecord(canonical_json({"kind": "llvm", "num-cores": n}), "local") for n in (2, 16)]
    target_rows = [{"id": i + 1, "target_hash": t.target_hash, "target_json": t.target_json, "key": t.key}
                   for i, t in enumerate(targets)]
    workloads, candidates, results = [], [], []
    for w in range(n_workloads):
        wh = sha256_text(f"workload-{w}")[:16]
        workloads.append({"id": w + 1, "workload_hash": wh, "name": f"fused_matmul_{w}", "op_kind": "matmul",
                          "script": f"# TVMScript of kernel {w}", "flops": 2.0 * 128 ** 3,
                          "shapes_json": canonical_json([{"shape": [128, 128], "dtype": "float32"}]),
                          "bytes_moved": 3 * 4 * 128.0 ** 2})
        for c in range(n_candidates):
            cid = w * n_candidates + c + 1
            trace = canonical_json([[["SamplePerfectTile", c % 7, c % 13]], [c]])
            candidates.append({"id": cid, "candidate_hash": sha256_text(wh + "\n" + trace), "workload_id": w + 1,
                               "trace_json": trace})
    statuses = rng.choice(STATUSES, size=(len(candidates), len(targets)))
    speeds = rng.lognormal(0.0, 0.5, size=(len(candidates), len(targets)))
    for ci, cand in enumerate(candidates):
        base = 1e-4 * (1 + cand["workload_id"] % 97)
        for ti in range(len(targets)):
            status = statuses[ci, ti]
            times = tuple(base * speeds[ci, ti] * rng.lognormal(0, 0.02, 5)) if status == MeasureStatus.OK else ()
            results.append({"candidate_id": cand["id"], "target_id": ti + 1, "session_id": None,
                            "status": status, "times_s": json.dumps(times), **measure_stats(times),
                            "build_time_s": 1.5, "error": "" if status == MeasureStatus.OK else f"{status}: synthetic",
                            "worker": "local:bench"})
    return targets, target_rows, workloads, candidates, results


def fill(url: str, data) -> None:
    """Bulk-insert the synthetic rows in one transaction per table."""
    _, target_rows, workloads, candidates, results = data
    bulk_insert(url, {"target": target_rows, "workload": workloads, "candidate": candidates,
                      "measure_result": results})


def timed(fn, repeats: int) -> dict:
    """Wall and client-CPU milliseconds of ``fn(i)`` over ``repeats`` calls: median, min, max.

    The client CPU time (``time.process_time``) excludes waiting for a busy CPU,
    so on a loaded machine it shows what the query costs this process; the
    PostgreSQL server's own work is only in the wall time.
    """
    wall, cpu = [], []
    for i in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn(i)
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return {"median_ms": statistics.median(wall) * 1e3, "min_ms": min(wall) * 1e3, "max_ms": max(wall) * 1e3,
            "cpu_median_ms": statistics.median(cpu) * 1e3}


def run(url: str, label: str, data, repeats: int) -> dict:
    targets, _, workloads, _, results = data
    open_database(url).close()  # the schema, through the migrations
    start = time.perf_counter()
    fill(url, data)
    fill_s = time.perf_counter() - start
    th = targets[1].target_hash
    rng = np.random.default_rng(1)
    picks = [workloads[i]["workload_hash"] for i in rng.integers(0, len(workloads), size=repeats)]
    figures = {"backend": label, "measure_results": len(results), "fill_s": fill_s}
    with open_database(url) as db:
        assert db.best(picks[0], th) is not None
        figures["best"] = timed(lambda i: db.best(picks[i], th), repeats)
        figures["measured"] = timed(lambda i: db.measured_candidates(picks[i], th), repeats)
        figures["history"] = timed(lambda i: db.training_rows(th, [picks[i]]), repeats)
        figures["training_set"] = timed(lambda i: db.training_rows(th), max(3, repeats // 5))
        figures["training_rows"] = len(db.training_rows(th))
    return figures


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse ``python -m bench.database``'s command line; a bad one exits 2 with argparse's error."""
    parser = bench_parser("database", __doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 workloads x 500 candidates (20,000 rows), a smoke run")
    parser.add_argument("--workloads", type=positive_int, default=None, help="default 500 (20 with --quick)")
    parser.add_argument("--candidates", type=positive_int, default=None,
                        help="per workload, each measured on 2 targets; default 1000 (500 with --quick)")
    parser.add_argument("--repeats", type=positive_int, default=20)
    parser.add_argument("--postgres", default=os.environ.get("TUNE_TEST_POSTGRES_URL"),
                        help="a PostgreSQL URL whose database may hold a scratch schema (dropped after)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object (bench.common)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.database [--quick] [--workloads W] [--candidates C] [--repeats R] [--postgres URL]
    [--json]``."""
    args = parse_args(argv)
    workloads = args.workloads or (20 if args.quick else 500)
    candidates = args.candidates or (500 if args.quick else 1000)
    started = time.perf_counter()
    data = synthetic(workloads, candidates)
    say = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    say(f"{len(data[4]):,} measure results, {len(data[3]):,} candidates, {len(data[2])} workloads, 2 targets")
    backends = []
    with tempfile.TemporaryDirectory() as tmp:
        backends.append(run(f"sqlite:///{tmp}/bench.db", "sqlite", data, args.repeats))
        report(backends[-1], say)
    if args.postgres:
        backends.append(_run_postgres(args.postgres, data, args.repeats))
        report(backends[-1], say)
    else:
        say("postgresql: skipped (pass --postgres URL or set TUNE_TEST_POSTGRES_URL)")
    if args.json:
        result = _result(backends, len(data[4]), args.postgres is not None)
        result.command = "python -m bench.database " + " ".join(argv if argv is not None else sys.argv[1:])
        result.seconds = time.perf_counter() - started
        print(json.dumps(result.to_json()))
    return 0


def _run_postgres(postgres_url: str, data, repeats: int) -> dict:
    with scratch_postgres_schema(postgres_url, "tune_bench") as url:
        return run(url, "postgresql", data, repeats)


def _result(backends: list[dict], n_rows: int, postgres: bool):
    """The suite's record: each query's median per backend; best-per-workload judged against 50 ms."""
    from bench.common import BenchResult, Row

    result = BenchResult(name="database", title=f"Tuning database: the tuner's queries over {n_rows:,} measure results")
    for f in backends:
        best = f["best"]["median_ms"]
        result.rows.append(Row(f"best per workload and target, {f['backend']} (ms, median)", best, 50.0, "goal 50 ms",
                               best / 50.0, "ms <= 50", bool(best <= 50.0)))
        for name in ("measured", "history", "training_set"):
            result.rows.append(Row(f"{name}, {f['backend']} (ms, median)", f[name]["median_ms"], None, "", None, "",
                                   None))
    result.notes.append("Synthetic records, 88% ok; medians of wall time over repeats (see bench/database.py).")
    if not postgres:
        result.notes.append("PostgreSQL not measured: no --postgres URL and no TUNE_TEST_POSTGRES_URL.")
    return result


def report(figures: dict, say=print) -> None:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    say(f"{figures['backend']}: filled in {figures['fill_s']:.1f} s; {figures['training_rows']:,} training rows; "
          f"load average {load} on {os.cpu_count()} CPUs")
    for name in ("best", "measured", "history", "training_set"):
        f = figures[name]
        say(f"  {name:<13} median {f['median_ms']:9.2f} ms  (min {f['min_ms']:.2f}, max {f['max_ms']:.2f}; "
              f"client CPU median {f['cpu_median_ms']:.2f} ms)")


if __name__ == "__main__":
    sys.exit(main())

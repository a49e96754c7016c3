"""The measurement service: measurements per minute with 1 and 2 workers, and its overhead.

Candidates: tiled schedules of one float32 matmul (``--n``, default 128), built
once. Three contenders measure the same candidates with the same protocol
(correctness check, then TVM's ``time_evaluator`` with cache flush, ``repeat``
repeats of at least ``min_repeat_ms``; re-measuring noisy candidates is off so
that every contender does the same work):

- bare: a loop in this process, pinned to core 0 with one TVM thread: load the
  built library, check it, ``time_evaluator`` (no tracker, no RPC, no worker processes);
- service, 1 worker: :class:`measure.Runner` through a local tracker to one
  worker pinned to core 0;
- service, 2 workers: the same with two workers pinned to cores 0 and 1.

Each contender measures the whole batch ``--rounds`` times, taking turns pass by
pass (so that a change in the shared machine's load touches all three alike);
figures are medians.
Goals (the measurement-service issue): overhead of the service with one worker
against the bare loop under 10%; two workers at least 1.8x one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time

import numpy as np

from database import MeasureStatus

from .common import BenchResult, Row, bench_parser, machine_info, positive_int, ratio_row

TILES = (4, 8, 16, 32)


def _candidates(n: int, copies: int):
    """Tiled matmul schedules (``copies`` of each tiling), as IRModules."""
    import tvm
    from tvm import te

    from measure.tvmapi import Schedule

    a = te.placeholder((n, n), "float32", name="A")
    b = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), "k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    base = tvm.IRModule({"main": te.create_prim_func([a, b, c]).with_attr("global_symbol", "main")})
    mods = []
    for tile in TILES:
        sch = Schedule(base)
        block = sch.get_sblock("C")
        i, j, kk = sch.get_loops(block)
        io, ii = sch.split(i, [None, tile])
        jo, ji = sch.split(j, [None, tile])
        sch.reorder(io, jo, kk, ii, ji)
        mods += [sch.mod] * copies
    return mods


def _bare(artifacts: list[str], arrays, config) -> float:
    """Seconds for the bare loop over ``artifacts`` (in this process)."""
    import tvm

    start = time.perf_counter()
    for path in artifacts:
        lib = tvm.runtime.load_module(path)
        dev = tvm.cpu(0)
        args = [tvm.runtime.tensor(x, device=dev) for x in arrays[:2]]
        args.append(tvm.runtime.tensor(np.full(arrays[2].shape, np.nan, np.float32), device=dev))
        lib["main"](*args)
        assert np.allclose(args[2].numpy(), arrays[2], rtol=config.rtol, atol=config.atol)
        evaluator = lib.time_evaluator("main", dev, number=config.number, repeat=config.repeat,
                                       min_repeat_ms=config.min_repeat_ms, f_preproc="cache_flush_cpu_non_first_arg")
        evaluator(*args)
    return time.perf_counter() - start


def _bare_pass(artifacts: list[str], arrays, config) -> float:
    """Seconds for one bare pass, pinned to core 0."""
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})
    try:
        return _bare(artifacts, arrays, config)
    finally:
        os.sched_setaffinity(0, saved)


def _service_pass(runner, builds, reference) -> float:
    """Seconds for one pass of :class:`measure.Runner` over ``builds``.

    Raises
    ------
    RuntimeError
        When a measurement failed.
    """
    start = time.perf_counter()
    results = runner.run(builds, reference)
    seconds = time.perf_counter() - start
    bad = [r for r in results if r.status != MeasureStatus.OK]
    if bad:
        raise RuntimeError(f"{len(bad)} measurements failed: {bad[0].error}")
    return seconds


def _contenders(builds, reference, config, rounds: int) -> dict[str, list[float]]:
    """Seconds per pass of the bare loop and the service with 1 and 2 pinned workers, passes taking turns."""
    from measure import LocalRPC, Runner

    times = {"bare": [], "one": [], "two": []}
    artifacts = [r.artifact_path for r in builds]
    with (LocalRPC(key="bench-service-1", workers=1, worker_cpus=[{0}]) as rpc1,
          LocalRPC(key="bench-service-2", workers=2, worker_cpus=[{0}, {1}]) as rpc2):
        runners = {"one": Runner(rpc1.address, rpc1.key, config), "two": Runner(rpc2.address, rpc2.key, config)}
        try:
            for workers, runner in enumerate(runners.values(), start=1):
                runner.run(builds[:workers], reference)  # start the pool's processes
            for _ in range(rounds):
                times["bare"].append(_bare_pass(artifacts, reference.arrays, config))
                for name, runner in runners.items():
                    times[name].append(_service_pass(runner, builds, reference))
        finally:
            for runner in runners.values():
                runner.close()
    return times


def run(quick: bool = False, n: int = 128, rounds: int | None = None) -> BenchResult:
    """Run the benchmark; see the module docstring."""
    # The bare loop runs in this process pinned to core 0: TVM's thread pool here gets one
    # thread, as a worker pinned to one core does (measure.threads). The pool reads the
    # variable when this process runs its first parallel kernel, which is later.
    os.environ["TVM_NUM_THREADS"] = "1"
    from measure import Builder, KernelReference, MeasureConfig
    from measure.tvmapi import make_target

    title = "Service: measurements per minute with 1 and 2 workers, overhead"
    if (os.cpu_count() or 1) < 2:
        return BenchResult.not_run("service", title, "needs 2 cores (one per pinned worker)")
    rounds = rounds or (2 if quick else 5)
    copies = 1 if quick else 2
    config = MeasureConfig(repeat=3, min_repeat_ms=40 if quick else 100, remeasure=0, timeout_s=60)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    reference = KernelReference((a, b, a @ b), n_outputs=1)

    builder = Builder(make_target({"kind": "llvm", "num-cores": 1}), workers=2, timeout_s=300)
    try:
        builds = builder.build(_candidates(n, copies))
    finally:
        builder.close()
    if any(r.error for r in builds):
        return BenchResult.not_run("service", title, f"a build failed: {next(r.error for r in builds if r.error)}")
    try:
        times = _contenders(builds, reference, config, rounds)
    finally:
        for r in builds:
            shutil.rmtree(os.path.dirname(r.artifact_path), ignore_errors=True)

    count = len(builds)
    per_min = {name: 60.0 * count / statistics.median(t) for name, t in times.items()}
    overhead = statistics.median(times["one"]) / statistics.median(times["bare"]) - 1.0
    result = BenchResult(name="service", title=title)
    result.rows = [
        Row("measurements per minute, bare loop (core 0)", per_min["bare"], None, "", None, "", None),
        Row("measurements per minute, service, 1 worker (core 0)", per_min["one"], None, "", None, "", None),
        Row("measurements per minute, service, 2 workers (cores 0, 1)", per_min["two"], None, "", None, "", None),
        Row("service overhead against the bare loop (1 worker), fraction", overhead, 0.0, "bare loop",
            overhead, "overhead < 0.10", bool(overhead < 0.10)),
        ratio_row("speed-up of 2 workers over 1 (measurements per minute)", per_min["two"], per_min["one"],
                  "service, 1 worker", 1.8, "ratio >= 1.8"),
    ]
    result.notes = [
        f"{count} candidates ({len(TILES)} tilings of a {n}x{n} float32 matmul), built once; {rounds} passes each, "
        "the contenders taking turns; medians of the pass times.",
        f"Protocol: correctness check, then time_evaluator repeat={config.repeat}, "
        f"min_repeat_ms={config.min_repeat_ms}, cache flush; no re-measuring (identical work for all three).",
        "Service times include requesting a worker from the tracker, upload, check and timing; "
        "the builds are not timed.",
        f"Load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())} "
        "(a shared machine skews every figure).",
    ]
    result.plot = {"kind": "bar", "series": dict(per_min)}
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse ``python -m bench.service``'s command line; a bad one exits 2 with argparse's error."""
    parser = bench_parser("service", __doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer candidates and passes (a smoke run)")
    parser.add_argument("--n", type=positive_int, default=128, help="matmul size")
    parser.add_argument("--rounds", type=positive_int, default=None, help="passes per contender")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.service [--quick] [--n N] [--rounds R] [--json]``."""
    args = parse_args(argv)
    started = time.perf_counter()
    result = run(quick=args.quick, n=args.n, rounds=args.rounds)
    result.command = "python -m bench.service " + " ".join(argv if argv is not None else sys.argv[1:])
    result.seconds = time.perf_counter() - started
    if args.json:
        print(json.dumps(result.to_json()))
    else:
        print(json.dumps(machine_info(result.command)))
        for row in result.rows:
            figure = row.ratio if row.ratio is not None else row.ours
            print(f"{row.what}: {figure:.4g}" + (f"  (goal {row.goal}: {'met' if row.met else 'NOT met'})"
                                                 if row.goal else ""))
        for note in result.notes:
            print(f"note: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

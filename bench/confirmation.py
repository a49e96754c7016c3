"""Confirming the leaders: does re-measuring a kernel's fastest candidates choose faster kernels, and report honestly?

``python -m bench.confirmation [--m 1 --k 1024 --n 6144] [--trials 16] [--seeds 0 1 2 3 4 5] [--check 9]
[--interference]``

One float32 projection on a packed weight (the kernel our e-graph emits for a
Qwen3-0.6B decode gate/up GEMV by default) is tuned from a fresh database, once
per seed, by our tuner with ``--trials`` measurements. Then, in the same
database and worker:

- the *single* choice is the candidate with the fastest first measurement (what
  the tuner kept before its leaders were confirmed), and its figure that measurement;
- the leaders are confirmed (:func:`tuner.search.confirm.confirm_leaders`, the
  product's defaults: the 3 fastest within 1.25x of the fastest, 3 measurements
  each); the *confirmed* choice is then the fastest by the median of its
  measurements, and its figure that median;
- both choices are measured ``--check`` more times, interleaved: the check.

Printed per seed and as medians over seeds: each choice's figure divided by
its check (above 1: the figure was pessimistic; below 1: optimistic, the
winner's curse), and the single choice's check divided by the confirmed choice's
(above 1: confirming chose a faster kernel). With ``--interference``, a
process copying 64 MiB arrays in bursts shares the machine all along, as
another user's job would. Not part of ``python -m bench``:
the default run (6 seeds x 16 trials) takes about 8 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile

from database import MeasureStatus
from measure import MeasureConfig
from tuner.search.confirm import confirm_leaders
from tuner.search.search import SearchConfig
from tuner.space.space import ScheduleSpace

from . import tuning

# Copies 64 MiB arrays for 0.2 to 1 s, then rests 0.5 to 2 s, forever (one core; killed at the end).
HOG = """
import random, time
import numpy as np
a, b = np.ones(1 << 24, np.float32), np.empty(1 << 24, np.float32)
while True:
    end = time.monotonic() + random.uniform(0.2, 1.0)
    while time.monotonic() < end:
        np.copyto(b, a)
    time.sleep(random.uniform(0.5, 2.0))
"""


def run_seed(tuner: tuning.OurTuner, kernel, trials: int, seed: int, check: int) -> dict:
    """One seed: tune, confirm, check both choices; figures in seconds."""
    wh, th = kernel.workload.workload_hash, tuner.target_rec.target_hash
    tuner.tune(kernel, trials, tuner.trainer(False), seed=seed, keep=True)
    first = tuner.db.best(wh, th)
    if first is None:
        raise SystemExit(f"seed {seed}: every candidate of {kernel.name} failed")
    single, single_s = first
    space = ScheduleSpace(kernel.func, wh, tuner.target, seed=seed)
    cfg = SearchConfig()
    try:
        taken = confirm_leaders(kernel, space, lambda n: tuner.db.candidate_latencies(wh, th, n),
                                tuner.measurer.remeasure, cfg.confirm_top, cfg.confirm_measurements)
        confirmed, confirmed_s = tuner.db.best(wh, th)
        choices = [space.replay(single)] + ([space.replay(confirmed)] if confirmed != single else [])
        checks = tuner.measurer.remeasure(kernel, choices, [check] * len(choices))
    finally:
        tuner.measurer.release()

    def ok_medians(records, cand) -> list[float]:
        out = [r.median_s for r in records if r.candidate_hash == cand.candidate_hash and r.status == MeasureStatus.OK]
        return out or [float("nan")]  # every check failed: the figures say so rather than crash

    return {"single_s": single_s, "single_check_s": statistics.median(ok_medians(checks, single)),
            "confirmed_s": confirmed_s, "confirmed_check_s": statistics.median(ok_medians(checks, confirmed)),
            # the confirmed choice's re-measurements alone, without the first measurement that made it a leader
            "confirmed_later_s": statistics.median(ok_medians(taken, confirmed)),
            "same": confirmed == single, "confirm_measurements": len(taken)}


def main() -> None:
    """Parse the options, run every seed, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=1)
    parser.add_argument("--k", type=int, default=1024)
    parser.add_argument("--n", type=int, default=6144)
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4, 5])
    parser.add_argument("--check", type=int, default=9, help="measurements of each choice in the check")
    parser.add_argument("--interference", action="store_true",
                        help="run a memory-bandwidth hog in bursts beside the tuner, as on a shared machine")
    args = parser.parse_args()
    shape = tuning.MatmulShape("decode gate/up", args.m, args.k, args.n)
    kernel = tuning.packed_kernel(shape)
    rows = []
    hog = subprocess.Popen([sys.executable, "-c", HOG]) if args.interference else None
    try:
        with tuning.OurTuner(tuning.bench_target(), MeasureConfig(repeat=10, min_repeat_ms=20)) as tuner:
            for seed in args.seeds:
                with tempfile.TemporaryDirectory() as tmp:
                    tuner.open(f"sqlite:///{tmp}/confirm.db")
                    row = run_seed(tuner, kernel, args.trials, seed, args.check)
                    tuner.close_db()
                rows.append(row)
                print(f"seed {seed}: single {row['single_s'] * 1e6:.1f} us (check {row['single_check_s'] * 1e6:.1f}), "
                      f"confirmed {row['confirmed_s'] * 1e6:.1f} us (check {row['confirmed_check_s'] * 1e6:.1f}), "
                      f"{'same candidate' if row['same'] else 'another candidate'}, "
                      f"{row['confirm_measurements']} re-measurements", flush=True)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    med = lambda key: statistics.median(key(r) for r in rows)  # noqa: E731
    print(f"{shape.label()} on a packed weight, {args.trials} trials, {len(rows)} seeds"
          + (", beside a memory-bandwidth hog" if hog else "") + ", medians over seeds:")
    print(f"  single choice:    figure / check {med(lambda r: r['single_s'] / r['single_check_s']):.3f}")
    print(f"  confirmed choice: figure / check {med(lambda r: r['confirmed_s'] / r['confirmed_check_s']):.3f}"
          f" (its re-measurements alone / check {med(lambda r: r['confirmed_later_s'] / r['confirmed_check_s']):.3f})")
    print(f"  check of single / check of confirmed {med(lambda r: r['single_check_s'] / r['confirmed_check_s']):.3f}"
          f" (another candidate chosen in {sum(not r['same'] for r in rows)} of {len(rows)} seeds)")


if __name__ == "__main__":
    main()

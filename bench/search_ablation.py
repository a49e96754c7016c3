"""Search ablation: does adding mutants of the fastest schedules to the pool find faster kernels sooner?

``python -m bench.search_ablation [--m 64 --n 1024 --k 512] [--trials 32] [--seeds 0 1 2 3]``

One float32 matmul kernel (TVM's lowering of a Relax ``matmul``, ``[m, k] x [k, n]``)
is tuned from a fresh database and an untrained cost model, once per seed, by our
tuner in two settings that differ only in ``SearchConfig.parents``:

- sampling only (``parents=0``): every batch is chosen from schedules sampled
  from the space;
- evolutionary (the default ``parents``): after each batch, mutants of the
  fastest schedules measured so far join the pool.

Printed per setting: the median over seeds of the best latency (microseconds,
the tuner's own measurement) after each batch, and the ratio sampling-only /
evolutionary (above 1: the evolutionary step found faster kernels). Not part of
``python -m bench``: at about 3 s per candidate on 2 cores, the default run
(4 seeds x 2 settings x 32 trials) takes about 7 minutes.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile

from measure import MeasureConfig
from tuner.search.search import SearchConfig

from . import tuning

BATCH_SIZE = 8


def budgets(trials: int) -> list[int]:
    """The trial counts after each batch."""
    return list(range(BATCH_SIZE, trials + 1, BATCH_SIZE))


def run(m: int, n: int, k: int, trials: int, seeds: list[int]) -> dict[int, list[list[float]]]:
    """Best latency (seconds) after each batch (see :func:`budgets`), per setting (``parents``) and seed."""
    kernel = tuning.matmul_kernel(tuning.MatmulShape("ablation", m, n, k))
    curves: dict[int, list[list[float]]] = {}
    settings = (0, SearchConfig().parents)
    with tuning.OurTuner(tuning.bench_target(), MeasureConfig(repeat=5, min_repeat_ms=20), BATCH_SIZE) as tuner:
        for seed in seeds:
            for parents in settings:  # the two settings take turns, so machine load touches both alike
                with tempfile.TemporaryDirectory() as tmp:
                    tuner.open(f"sqlite:///{tmp}/ablation.db")
                    tuner.search = dataclasses.replace(tuner.search, parents=parents)
                    trials_done = tuner.tune(kernel, trials, tuner.trainer(False), seed=seed)
                    tuner.close_db()
                best = [tuning.best_so_far(trials_done, b) for b in budgets(trials)]
                curves.setdefault(parents, []).append([t.median_s if t else float("nan") for t in best])
                print(f"parents={parents} seed={seed}: best us after " + ", ".join(
                    f"{b}: {s * 1e6:.1f}" for b, s in zip(budgets(trials), curves[parents][-1])), flush=True)
    return curves


def main() -> None:
    """Parse the options, run both settings, print the medians and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=64)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--k", type=int, default=512)
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    args = parser.parse_args()
    curves = run(args.m, args.n, args.k, args.trials, args.seeds)
    sampling, evolutionary = (curves[p] for p in sorted(curves))
    print(f"matmul {args.m}x{args.n}x{args.k}, {len(args.seeds)} seeds, median best latency (us):")
    for i, b in enumerate(budgets(args.trials)):
        s = statistics.median(c[i] for c in sampling)
        e = statistics.median(c[i] for c in evolutionary)
        print(f"  {b:4d} trials: sampling only {s * 1e6:9.1f}  evolutionary {e * 1e6:9.1f}  ratio {s / e:.3f}")


if __name__ == "__main__":
    main()

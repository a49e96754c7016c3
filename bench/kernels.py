"""Benchmark 1: tuned Qwen3-0.6B GEMMs (prefill) and GEMVs (decode) against numpy, PyTorch and the roofline.

Shapes are Qwen3-0.6B's projections (hidden 1024, 16 query heads and 8 K/V heads
of 128, intermediate 3072; ``extract/configs/qwen3-0.6b.json``) with the merges
our e-graph makes: Q/K/V merged (1024 -> 4096), gate/up merged (1024 -> 6144) and
down (3072 -> 1024); M = 128 tokens for prefill, M = 1 for decode.

Ours is the kernel our e-graph emits for such a projection: the weight packed once
into ``[N / 16, K, 16]`` blocks (rule ``weight_layout``, ``bench.tuning.packed_kernel``;
the packing is not timed, as it runs once when a program's weights are prepared).
Each kernel is tuned by our tuner (``bench.tuning.OurTuner``: real builds, a
real RPC worker, a real SQLite database); its best schedule, numpy's ``matmul``
(its BLAS) and ``torch.matmul`` are then timed in this process by one timer
(``bench.common.median_times``: median of repeats, the three taking turns so
that a slow spell of a shared machine falls on all of them, weights rotated
through copies that together exceed twice the last-level cache, so weights come
from memory as in a real layer). The roofline (peak FLOP/s, bandwidth) is measured
in the same run by ``measure.roofline``.

Goals (issue): prefill GEMMs reach at least 0.9x numpy's BLAS throughput;
decode GEMVs reach at least 80% of the bandwidth roofline (bytes of x, w and
out over the time, divided by the STREAM-copy bandwidth).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from measure import MeasureConfig
from measure.roofline import measure_roofline

from .common import SETTLE_S, BenchResult, Row, bench_parser, median_times, positive_int, ratio_row
from .tuning import (
    MatmulData,
    MatmulShape,
    OurTuner,
    bench_target,
    best_so_far,
    compile_trace,
    numpy_call,
    packed_kernel,
    torch_call,
    tvm_call,
)

NAME, TITLE = "kernels", "Kernels: Qwen3-0.6B GEMMs and GEMVs against BLAS, PyTorch and the roofline"

FULL_SHAPES = [
    MatmulShape("prefill qkv", 128, 1024, 4096),
    MatmulShape("prefill gate/up", 128, 1024, 6144),
    MatmulShape("prefill down", 128, 3072, 1024),
    MatmulShape("decode qkv", 1, 1024, 4096),
    MatmulShape("decode gate/up", 1, 1024, 6144),
    MatmulShape("decode down", 1, 3072, 1024),
]
QUICK_SHAPES = [MatmulShape("prefill (small)", 32, 256, 512), MatmulShape("decode (small)", 1, 512, 1024)]
FULL_TRIALS, QUICK_TRIALS = 128, 8
GEMM_GOAL, GEMV_GOAL = 0.9, 0.8
REPEAT = 11  # timing repeats per contender, interleaved (bench.common.median_times)


def run(quick: bool = False, trials: int | None = None, db_url: str | None = None) -> BenchResult:
    """Tune and time every shape; the table and the roofline plot's data."""
    shapes = QUICK_SHAPES if quick else FULL_SHAPES
    trials = trials or (QUICK_TRIALS if quick else FULL_TRIALS)
    start = time.time()
    target = bench_target()
    roof = measure_roofline()
    rows: list[Row] = []
    points = []
    with tempfile.TemporaryDirectory(prefix="bench-kernels-") as tmp:
        url = db_url or f"sqlite:///{os.path.join(tmp, 'kernels.db')}"
        with OurTuner(target, MeasureConfig(repeat=5, min_repeat_ms=20)) as tuner:
            tuner.open(url)
            tuned = []
            for shape in shapes:
                kernel = packed_kernel(shape)
                trials_done = tuner.tune(kernel, trials, tuner.trainer(warm=False))
                tuned.append((shape, kernel, best_so_far(trials_done, len(trials_done)), len(trials_done)))
    for shape, kernel, best, n in tuned:
        data = MatmulData(shape)
        calls = {"numpy": numpy_call(data), "torch": torch_call(data)}
        if best:
            calls["ours"] = tvm_call(compile_trace(kernel, best.trace_json, target), data, packed=True)
        times = median_times(calls, data.variants, REPEAT)
        ours, np_s, torch_s = times.get("ours"), times["numpy"], times["torch"]
        flops = lambda s, shape=shape: shape.flops / s if s else None  # noqa: E731
        label = f"{shape.label()} ({n} trials)"
        if shape.m > 1:
            rows.append(ratio_row(f"{label}: GFLOP/s vs numpy", _g(flops(ours)), _g(flops(np_s)), "numpy (BLAS)",
                                  GEMM_GOAL, f"ours/numpy >= {GEMM_GOAL}"))
            vs_torch = flops(ours) / flops(torch_s) if ours else None
            rows.append(Row(f"{label}: GFLOP/s vs PyTorch", _g(flops(ours)), _g(flops(torch_s)), "PyTorch",
                            vs_torch, "(reported, no goal)", None))
        else:
            bw = lambda s, shape=shape: shape.bytes_moved / s if s else None  # noqa: E731
            frac = bw(ours) / roof.bandwidth_bytes_per_s if ours else None
            rows.append(Row(f"{label}: GB/s vs bandwidth roofline", _g(bw(ours)), _g(roof.bandwidth_bytes_per_s),
                            "STREAM copy (measured)", frac, f"ours/roofline >= {GEMV_GOAL}",
                            None if frac is None else frac >= GEMV_GOAL))
            rows.append(Row(f"{label}: GB/s vs numpy, PyTorch", _g(bw(ours)), _g(bw(np_s)),
                            f"numpy (PyTorch {_g(bw(torch_s)):.3g})", bw(ours) / bw(np_s) if ours else None,
                            "(reported, no goal)", None))
        intensity = shape.flops / shape.bytes_moved
        points.append({"label": shape.label(), "intensity": intensity,
                       "ours": flops(ours), "numpy": flops(np_s), "torch": flops(torch_s)})
    notes = [
        f"Roofline measured in this run: peak {roof.peak_flops_per_s / 1e9:.1f} GFLOP/s (TVM-built FMA "
        f"microbenchmark, the best of its register-resident shapes), "
        f"bandwidth {roof.bandwidth_bytes_per_s / 1e9:.1f} GB/s (STREAM copy), {roof.cores} threads.",
        f"Times: median of {REPEAT} repeats in one process, ours, numpy and PyTorch taking turns (one repeat "
        f"each, rotating order, {SETTLE_S} s idle before each so the previous library's threads stop spinning), "
        "weights rotated through copies that exceed twice the last-level cache; ours is the best schedule our "
        f"tuner found (its own database, cold, {trials} trials per kernel, its register-blocked seeds among "
        "them: GEMM tiles, and one-row tiles for a GEMV), checked against numpy before timing; ours reads the "
        "weight packed into [N/16, K, 16] blocks (packed once, not timed), numpy and PyTorch read it as [K, N].",
        "GB/s counts x, w and out once (the minimum traffic); the roofline is STREAM copy bandwidth.",
    ]
    plot = {"kind": "roofline", "peak_flops_per_s": roof.peak_flops_per_s,
            "bandwidth_bytes_per_s": roof.bandwidth_bytes_per_s, "points": points}
    return BenchResult(NAME, TITLE, rows=rows, notes=notes, plot=plot, seconds=time.time() - start)


def _g(value: float | None) -> float | None:
    """Per second to giga per second."""
    return value / 1e9 if value is not None else None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse ``python -m bench.kernels``'s command line; a bad one exits 2 with argparse's error."""
    parser = bench_parser("kernels", __doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, few trials (a smoke run)")
    parser.add_argument("--trials", type=positive_int, default=None, help="trials per kernel")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.kernels [--quick] [--trials N] [--json]``."""
    args = parse_args(argv)
    result = run(quick=args.quick, trials=args.trials)
    result.command = "python -m bench.kernels " + " ".join(argv if argv is not None else sys.argv[1:])
    print(json.dumps(result.to_json()) if args.json else json.dumps(result.to_json(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark 1: tuned Qwen3-0.6B GEMMs (prefill) and GEMVs (decode) against numpy, PyTorch, its peers and the roofline.

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

The peers (:mod:`bench.peers`: ``torch.compile`` default and max-autotune, ONNX
Runtime's MatMul) run each in a process of their own (:mod:`tuner.contender`),
checked against numpy first, timed in the same rounds. Where the environment sets
OpenBLAS's ``OPENBLAS_CORETYPE`` or ``OPENBLAS_L2_SIZE``, numpy is also timed in a
process started with them unset.

Goals (issue 42): prefill GEMMs reach at least 1.2x the fastest library of the row
(numpy's BLAS, PyTorch, its peers) and 0.8 of the FMA peak; decode GEMVs at least 1.0x
the fastest and 0.9 of the bandwidth roofline (bytes of x, w and out over the time,
divided by the STREAM-copy bandwidth).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from functools import partial

from measure import MeasureConfig
from measure.roofline import llc_bytes, measure_roofline
from measure.threads import physical_cores
from tuner.contender import Contenders
from tuner.peers import LABELS, installed

from .common import SETTLE_S, BenchResult, Row, bench_parser, median_times, positive_int, ratio_row
from .peers import matmul_peer, numpy_matmul, openblas_settings, without_openblas_settings
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

NAME, TITLE = "kernels", "Kernels: Qwen3-0.6B GEMMs and GEMVs against BLAS, PyTorch, its peers and the roofline"

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
# goals (issue 42): against the fastest library of each row, and against the roofline
GEMM_GOAL, GEMM_PEAK_GOAL = 1.2, 0.8
GEMV_GOAL, GEMV_ROOF_GOAL = 1.0, 0.9
NUMPY_UNSET = "numpy (OpenBLAS settings unset)"
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
    statuses: dict = {}
    compile_s: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-kernels-") as tmp:
        url = db_url or f"sqlite:///{os.path.join(tmp, 'kernels.db')}"
        with OurTuner(target, MeasureConfig(repeat=5, min_repeat_ms=20)) as tuner:
            tuner.open(url)
            tuned = []
            for shape in shapes:
                kernel = packed_kernel(shape)
                trials_done = tuner.tune(kernel, trials, tuner.trainer(warm=False))
                tuned.append((shape, kernel, best_so_far(trials_done, len(trials_done)), len(trials_done)))
    blas_env = openblas_settings()
    for shape, kernel, best, n in tuned:
        data = MatmulData(shape)
        calls = {"numpy (BLAS)": numpy_call(data), "PyTorch eager": torch_call(data)}
        if best:
            calls["ours"] = tvm_call(compile_trace(kernel, best.trace_json, target), data, packed=True)
        with Contenders(peer_builds(data), (data.expected,), cold_bytes=2 * llc_bytes()) as peers, \
                Contenders({NUMPY_UNSET: partial(numpy_matmul, data.x, data.ws[0])} if blas_env else {},
                           (data.expected,), cold_bytes=2 * llc_bytes()) as unset:
            peers.start()
            with without_openblas_settings():
                unset.start()

            def others(_r: int) -> None:
                peers.time_round()
                unset.time_round()

            times = median_times(calls, data.variants, REPEAT, between=others)
        results = {**peers.results, **unset.results}
        times.update({name: r.median_s for name, r in results.items()})
        statuses.update({f"{shape.label()}: {name}": r for name, r in results.items() if r.status != "ok"})
        compile_s.update({f"{shape.label()}: {name}": r.compile_s for name, r in results.items()
                          if r.status == "ok" and "compile" in name})
        ours = times.get("ours")
        libraries = {name: t for name, t in times.items() if name != "ours" and t}
        fastest = min(libraries, key=libraries.get)
        flops = lambda s, shape=shape: shape.flops / s if s else None  # noqa: E731
        bw = lambda s, shape=shape: shape.bytes_moved / s if s else None  # noqa: E731
        label = f"{shape.label()} ({n} trials)"
        if shape.m > 1:
            rows.append(ratio_row(f"{label}: GFLOP/s vs the fastest library", _g(flops(ours)),
                                  _g(flops(libraries[fastest])), fastest, GEMM_GOAL, f"ours/fastest >= {GEMM_GOAL}"))
            rows.append(ratio_row(f"{label}: GFLOP/s vs FMA peak", _g(flops(ours)), _g(roof.peak_flops_per_s),
                                  "FMA peak (measured)", GEMM_PEAK_GOAL, f"ours/peak >= {GEMM_PEAK_GOAL}"))
            per = flops
        else:
            rows.append(ratio_row(f"{label}: GB/s vs the fastest library", _g(bw(ours)), _g(bw(libraries[fastest])),
                                  fastest, GEMV_GOAL, f"ours/fastest >= {GEMV_GOAL}"))
            rows.append(ratio_row(f"{label}: GB/s vs bandwidth roofline", _g(bw(ours)),
                                  _g(roof.bandwidth_bytes_per_s), "STREAM copy (measured)", GEMV_ROOF_GOAL,
                                  f"ours/roofline >= {GEMV_ROOF_GOAL}"))
            per = bw
        for name, t in libraries.items():
            if name != fastest:
                rows.append(Row(f"{label}: {'GFLOP/s' if shape.m > 1 else 'GB/s'} vs {name}", _g(per(ours)),
                                _g(per(t)), name, per(ours) / per(t) if ours else None, "(reported, no goal)", None))
        intensity = shape.flops / shape.bytes_moved
        points.append({"label": shape.label(), "intensity": intensity, "ours": flops(ours),
                       "numpy": flops(times["numpy (BLAS)"]), "torch": flops(times["PyTorch eager"]),
                       "fastest": flops(libraries[fastest])})
    notes = [
        f"Roofline measured in this run: peak {roof.peak_flops_per_s / 1e9:.1f} GFLOP/s (TVM-built FMA "
        f"microbenchmark, the best of its register-resident shapes), "
        f"bandwidth {roof.bandwidth_bytes_per_s / 1e9:.1f} GB/s (STREAM copy), {roof.cores} threads.",
        f"Times: median of {REPEAT} repeats, ours, numpy and PyTorch eager in this process, taking turns (one repeat "
        f"each, rotating order, {SETTLE_S} s idle before each so the previous library's threads stop spinning), "
        "weights rotated through copies that exceed twice the last-level cache; ours is the best schedule our "
        f"tuner found (its own database, cold, {trials} trials per kernel, its register-blocked seeds among "
        "them: GEMM tiles, and one-row tiles for a GEMV), checked against numpy before timing; ours reads the "
        "weight packed into [N/16, K, 16] blocks (packed once, not timed), numpy and PyTorch read it as [K, N].",
        "Peers, each in a process of its own on the same thread count and timed in the same rounds (one repeat "
        "each after every round of the others): torch.compile default mode, torch.compile "
        "max-autotune-no-cudagraphs with freezing and the CPP,ATEN GEMM backends, ONNX Runtime's MatMul (CPU "
        "EP, all graph optimisations) on the exported one-matmul module; each checked against numpy's output "
        "before it is timed; their weight is evicted by a write of twice the last-level cache before each "
        "timed call (the flush is not timed) instead of rotated copies.",
        "Goals: prefill GEMMs at least 1.2x the fastest library of the row and 0.8 of the FMA peak; decode GEMVs "
        "at least 1.0x the fastest library and 0.9 of the bandwidth roofline.",
        "GB/s counts x, w and out once (the minimum traffic); the roofline is STREAM copy bandwidth.",
    ]
    if blas_env:
        notes.append("This environment sets " + ", ".join(f"{k}={v}" for k, v in blas_env.items())
                     + ": numpy (BLAS) is timed with them, and again as \"" + NUMPY_UNSET + "\" in a process "
                     "started with them unset; a gap between the two is what the settings cost numpy here.")
    if compile_s:
        notes.append("Peer compile times (build and first call): " + ", ".join(
            f"{k} {v:.1f} s" for k, v in compile_s.items()) + ".")
    for what, r in statuses.items():
        notes.append(f"{what}: {r.status}, not timed ({r.error}).")
    plot = {"kind": "roofline", "peak_flops_per_s": roof.peak_flops_per_s,
            "bandwidth_bytes_per_s": roof.bandwidth_bytes_per_s, "points": points}
    return BenchResult(NAME, TITLE, rows=rows, notes=notes, plot=plot, seconds=time.time() - start)


def peer_builds(data: MatmulData) -> dict:
    """The contender builds of the installed peers of ``data``'s matmul (x and its first weight), by label."""
    threads = physical_cores()
    return {LABELS[name]: partial(matmul_peer, name, data.x, data.ws[0], threads)
            for name in ("torch_compile", "torch_compile_max_autotune", "onnxruntime") if installed(name)}


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

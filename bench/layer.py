"""End to end: one decoder layer per stage, ours against PyTorch eager and MetaSchedule.

``python -m bench.layer [--quick] [--trials N] [--json]``

For each stage (``prefill`` of ``--seq-len`` tokens, ``prefill-kv`` of ``--seq-len``
tokens over a ``--kv-len`` cache, ``decode`` over a ``--kv-len`` cache) of a Qwen3-0.6B
decoder layer in float32:

- **ours**: the product's own path, ``tune run`` (:class:`tuner.session.TuneRun`):
  e-graph candidates, ``--trials`` measurements per workload through a local RPC
  tracker and worker, the cheapest candidate program compiled and timed on the worker
  (median of ``--repeat`` repeats), verified against PyTorch;
- **PyTorch eager**: the same layer in transformers with SDPA attention (median of
  repeats, :meth:`extract.ImportedModel.torch_eager`);
- **MetaSchedule**: its ``tune_relax`` on the same Relax layer with
  the same total trial budget (the number of measurements ours made in its session),
  compiled with ``compile_relax`` and timed with the VM's ``time_evaluator`` (median
  of repeats).

It also reports each of our kernels' share of the layer's time and its fraction of this
machine's roofline (:func:`measure.roofline.measure_roofline`: measured peak FLOP/s and
memory bandwidth), ``min(peak, bandwidth * FLOPs / bytes)``, Williams, Waterman and
Patterson 2009.  Goals (issue): prefill 1.2x faster than PyTorch eager and 1.5x faster
than MetaSchedule at the same budget; decode at least as fast as PyTorch eager.

``--quick`` runs the tiny config (``qwen3-tiny``, 8 tokens) with 2 trials per workload,
the prefill stage only and without the MetaSchedule anchor (``tune_relax`` searches each
of a tiny layer's two dozen tasks and builds each batch in fresh processes: about 7
minutes on 2 cores, most of the quick suite's 10): a smoke test of the script, not a figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import tvm

from .common import BenchResult, Row, bench_parser, fmt, positive_int, ratio_row
from .tuning import metaschedule_builder

STAGES = ("prefill", "prefill-kv", "decode")
FULL_TRIALS = 64  # measurements per workload for ours in the full mode
# (stage, anchor, goal ratio anchor/ours); stages without a goal are reported only.
GOALS = {
    ("prefill", "PyTorch eager"): 1.2,
    ("prefill", "MetaSchedule tune_relax"): 1.5,
    ("decode", "PyTorch eager"): 1.0,
}


def tune_ours(model: str, stage: str, seq_len: int, kv_len: int, trials: int, repeat: int,
              work_dir: str):
    """Run the product's ``tune run`` on one stage; its :class:`tuner.session.RunSummary`."""
    from tuner.progress import Progress
    from tuner.session import RunOptions, TuneRun

    options = RunOptions(
        model=model, stage=stage, seq_len=seq_len, kv_len=kv_len, trials=trials, repeat=repeat,
        db=f"sqlite:///{os.path.join(work_dir, 'tune.db')}",
        artifact_dir=os.path.join(work_dir, "artifacts"),
    )
    return TuneRun(options, Progress(quiet=True)).run()


def metaschedule_layer(imported, trials: int, target, work_dir: str, repeat: int) -> float:
    """Median seconds of the layer tuned by ``tune_relax`` with ``trials`` trials in all.

    Trials per iteration are the budget shared out over the extracted tasks (at most
    MetaSchedule's default 64), so each task is tuned at least once within the budget;
    the builder is :func:`bench.tuning.metaschedule_builder`.
    """
    from tvm import relax

    from measure.tvmapi import ms
    from tuner.kernels import lower_to_kernels

    shutil.rmtree(work_dir, ignore_errors=True)
    params = {name: tvm.runtime.tensor(np.require(a, requirements="C"))
              for name, a in zip(imported.param_names, imported.params, strict=True)}
    # TVM's default legalization and fusion, so the layer's kernels are PrimFuncs MetaSchedule can extract
    mod = lower_to_kernels(relax.transform.BindParams("main", params)(imported.mod))
    # trials per iteration: a share of the budget for each task (at most its default 64), so every
    # task gets a round before the budget runs out, as ours gives every workload its trials
    tasks = len(ms.relax_integration.extract_tasks(mod, target))
    per_iter = min(64, max(1, -(-trials // max(tasks, 1))))
    database = ms.relax_integration.tune_relax(
        mod, {}, target, work_dir, max_trials_global=max(trials, per_iter),
        num_trials_per_iter=per_iter,
        builder=metaschedule_builder(target),
    )
    executable = ms.relax_integration.compile_relax(database, mod, target, None)
    vm = relax.VirtualMachine(executable, tvm.cpu())
    args = [tvm.runtime.tensor(np.require(a, requirements="C")) for a in imported.inputs]
    timer = vm.time_evaluator("main", tvm.cpu(), number=1, repeat=repeat, min_repeat_ms=20)
    return float(statistics.median(timer(*args).results))


def kernel_rows(summary, db_url: str, roofline) -> list[dict]:
    """Each kernel of our program: share of the summed kernel time and fraction of roofline."""
    from database import open_database

    db = open_database(db_url)
    try:
        kernels = [k for k in summary.kernels if k.latency_s]
        total = sum(k.calls * k.latency_s for k in kernels) or 1.0
        rows = []
        for k in kernels:
            record = db.get_workload(k.workload_hash)
            moved = record.bytes_moved if record is not None else 0.0
            achieved = k.flops / k.latency_s if k.flops else 0.0
            intensity = k.flops / moved if moved else float("inf")
            attainable = float(roofline.attainable_flops_per_s(intensity)) if k.flops else None
            if not k.flops and moved:  # a pure data-movement kernel: against bandwidth
                fraction = moved / k.latency_s / roofline.bandwidth_bytes_per_s
            else:
                fraction = achieved / attainable if attainable else None
            rows.append({"kernel": k.name, "calls": k.calls, "latency_s": k.latency_s,
                         "share": k.calls * k.latency_s / total, "roofline_fraction": fraction})
        return sorted(rows, key=lambda r: -r["share"])
    finally:
        db.close()


def layer_db_name(model: str, stage: str, seq_len: int, kv_len: int) -> str:
    """File name of the tuning database a run leaves in ``$BENCH_WORK_DIR``: named by what it tuned."""
    return f"layer-{model}-{stage}-{seq_len}-{kv_len}.db"


def run(quick: bool = False, trials: int | None = None, model: str | None = None,
        seq_len: int | None = None, kv_len: int | None = None, repeat: int = 10,
        stages: tuple[str, ...] = STAGES, metaschedule: bool = True) -> BenchResult:
    """Run the benchmark; see the module docstring."""
    from extract import load_model
    from measure.roofline import measure_roofline
    from tuner.target import resolve_target

    model = model or ("qwen3-tiny" if quick else "qwen3-0.6b")
    seq_len = seq_len or (8 if quick else 128)
    kv_len = kv_len or (16 if quick else 512)
    trials = trials if trials is not None else (2 if quick else FULL_TRIALS)
    command = " ".join(["python", "-m", "bench.layer"] + sys.argv[1:])
    result = BenchResult(name="layer", title=f"End to end: the {model} layer per stage", command=command)
    start = time.time()
    roofline = measure_roofline()
    target = resolve_target().target
    per_stage = {}
    with tempfile.TemporaryDirectory(prefix="bench-layer-") as work:
        for stage in stages:
            stage_dir = os.path.join(work, stage)
            os.makedirs(stage_dir)
            summary = tune_ours(model, stage, seq_len, kv_len, trials, repeat, stage_dir)
            ours = summary.latency_s["tuned"]
            torch_s = summary.latency_s["torch_eager"]
            ms_s = None
            if metaschedule:
                imported = load_model(model, stage, seq_len=seq_len, kv_len=kv_len)
                ms_s = metaschedule_layer(imported, summary.measured_trials, target,
                                          os.path.join(stage_dir, "ms"), repeat)
            kernels = kernel_rows(summary, f"sqlite:///{os.path.join(stage_dir, 'tune.db')}", roofline)
            if os.environ.get("BENCH_WORK_DIR"):  # the later-compile benchmark's quick mode starts from it
                shutil.copyfile(os.path.join(stage_dir, "tune.db"), os.path.join(
                    os.environ["BENCH_WORK_DIR"], layer_db_name(model, stage, seq_len, kv_len)))
            per_stage[stage] = {"ours_s": ours, "torch_eager_s": torch_s, "metaschedule_s": ms_s,
                                "trials": summary.measured_trials, "rewrites": summary.graph["rewrites"],
                                "priced_s": summary.graph["predicted_latency_s"], "kernels": kernels,
                                "memory": summary.memory}
            memory = summary.memory  # peak of the run's processes over its weights (tuner.memory)
            result.rows.append(Row(f"{stage} run's peak memory (bytes), times the weights' bytes", memory["peak_bytes"],
                                   memory["weight_bytes"], "weights", memory["peak_to_weights"], "reported", None))
            for anchor_name, anchor in (("PyTorch eager", torch_s), ("MetaSchedule tune_relax", ms_s)):
                goal = GOALS.get((stage, anchor_name))
                what = f"{stage} layer latency (s), speed-up over {anchor_name}"
                if goal is None:
                    speedup = anchor / ours if anchor and ours else None
                    result.rows.append(Row(what, ours, anchor, anchor_name, speedup, "reported", None))
                else:
                    result.rows.append(ratio_row(what, ours, anchor, anchor_name, goal,
                                                 f"ratio >= {goal}", higher_is_better=False))
    scaled = f" (below the full mode's {FULL_TRIALS})" if not quick and trials < FULL_TRIALS else ""
    result.notes += [
        f"{model}, float32, prefill {seq_len} tokens, prefill-kv {seq_len} over {kv_len}, decode over {kv_len}; "
        f"stages run: {', '.join(stages)}; ours: {trials} trials per workload{scaled}; "
        "MetaSchedule: the same total number of trials.",
        f"Roofline of this machine: {fmt(roofline.peak_flops_per_s / 1e9)} GFLOP/s, "
        f"{fmt(roofline.bandwidth_bytes_per_s / 1e9)} GB/s (measured in this run).",
        "Medians of repeats; the machine may be shared and loaded (see the load average).",
        "A kernel's fraction of roofline can pass 1 when it mostly reads (a GEMV streaming its weight): "
        "the bandwidth is STREAM copy's, which counts one read and one write per element, not the "
        "write-allocate read a copy also causes.",
    ]
    for stage, data in per_stage.items():
        top = ", ".join(f"{k['kernel']} {k['share']:.0%} ({fmt(k['roofline_fraction'], 2)} of roofline)"
                        for k in data["kernels"][:6])
        result.notes.append(f"{stage}: rewrites {'+'.join(data['rewrites']) or 'none'}; "
                            f"{data['trials']} trials; priced {fmt(data['priced_s'])} s from its kernels' "
                            f"measurements, {fmt(data['ours_s'])} s end to end; kernels by share of time: {top}.")
    result.plot = {"kind": "ratios", "stages": per_stage}
    result.seconds = time.time() - start
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse ``python -m bench.layer``'s command line; a bad one exits 2 with argparse's error."""
    parser = bench_parser("layer", __doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny config, 2 trials: a smoke test")
    parser.add_argument("--trials", type=positive_int,
                        help=f"measurements per workload for ours (default {FULL_TRIALS})")
    parser.add_argument("--model", help="model name (default qwen3-0.6b)")
    parser.add_argument("--seq-len", type=positive_int, help="prompt (chunk) tokens (default 128)")
    parser.add_argument("--kv-len", type=positive_int, help="KV cache tokens (default 512)")
    parser.add_argument("--repeat", type=positive_int, default=10, help="timing repeats (medians)")
    parser.add_argument("--stages", nargs="+", choices=STAGES, help="default: all (prefill only with --quick)")
    parser.add_argument("--no-metaschedule", action="store_true", help="skip the tune_relax anchor")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = parser.parse_args(argv)
    if args.model:
        from extract import ModelImportError, check_model

        try:
            check_model(args.model)
        except ModelImportError as exc:
            parser.error(f"--model: {exc}")
    return args


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.layer [--quick] [--trials N] [--stages S ...] [--json]``."""
    args = parse_args(argv)
    stages = tuple(args.stages or (("prefill",) if args.quick else STAGES))
    result = run(args.quick, args.trials, args.model, args.seq_len, args.kv_len, args.repeat,
                 stages, not (args.no_metaschedule or args.quick))
    if args.quick:
        result.notes.append("Quick mode: prefill only, no MetaSchedule anchor (see the script's docstring).")
    if args.json:
        print(json.dumps(result.to_json()))
    else:
        for row in result.rows:
            print(f"{row.what}: ours {fmt(row.ours)} s, {row.anchor_name} {fmt(row.anchor)} s, "
                  f"ratio {fmt(row.ratio)} ({row.goal}, met: {row.met})")
        for note in result.notes:
            print(note)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

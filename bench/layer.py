"""End to end: one decoder layer per stage against PyTorch eager, torch.compile, ONNX Runtime and MetaSchedule.

``python -m bench.layer [--quick] [--trials N] [--json]``

For each stage (``prefill`` of ``--seq-len`` tokens, ``prefill-kv`` of ``--seq-len``
tokens over a ``--kv-len`` cache, ``decode`` over a ``--kv-len`` cache) of a Qwen3-0.6B
decoder layer in float32:

- **ours**: the product's own path, ``tune run`` (:class:`tuner.session.TuneRun`):
  e-graph candidates, ``--trials`` measurements per workload through a local RPC
  tracker and worker, the cheapest candidate program compiled and timed on the worker
  (median of ``--repeat`` repeats), verified against PyTorch;
- **PyTorch eager**: the same layer in transformers with SDPA attention (median of
  repeats, :meth:`extract.ImportedModel.torch_eager`), timed between ours' repeats;
- **the peers** (:mod:`tuner.peers`): ``torch.compile`` in Inductor's default mode, in
  ``max-autotune-no-cudagraphs`` mode with freezing and the C++ GEMM template, and ONNX
  Runtime's CPU execution provider on the layer exported to ONNX (KV cache as explicit
  inputs and outputs), each in a process of its own (:mod:`tuner.contender`), each
  checked against the PyTorch reference before it is timed (a peer whose outputs differ
  is reported, not timed), timed in the same rounds as ours on the same thread count;
- **MetaSchedule**: its ``tune_relax`` on the same Relax layer with
  the same total trial budget (the number of measurements ours made in its session),
  compiled with ``compile_relax`` and timed with the VM's ``time_evaluator`` (median
  of repeats).

It also reports each of our kernels' share of the layer's time and its fraction of this
machine's roofline (:func:`measure.roofline.measure_roofline`: measured peak FLOP/s and
memory bandwidth), ``min(peak, bandwidth * FLOPs / bytes)``, Williams, Waterman and
Patterson 2009.  Goals (issue 42), against the fastest peer of each stage (eager
included): prefill and prefill-kv 1.4x faster, decode 1.3x faster; MetaSchedule and each
peer are reported beside it.

Decode is timed twice (``--no-cold`` skips the second): warm, as above, where the
layer's weights (63 MB in float32 for Qwen3-0.6B) partly stay in the last-level cache
from one call to the next, and cold, as a 28-layer model meets it, with the weights
evicted before every call (:func:`cold_results`: ours' artifact and every peer, each in
a process of its own, a write of twice the last-level cache before each timed call).

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
from functools import partial

import numpy as np
import tvm

from .common import BenchResult, Row, bench_parser, check_model_option, fmt, positive_int, ratio_row
from .tuning import metaschedule_builder

STAGES = ("prefill", "prefill-kv", "decode")
FULL_TRIALS = 64  # measurements per workload for ours in the full mode
# (stage, anchor, goal ratio anchor/ours); stages without a goal are reported only.
PEERS = ("torch_eager", "torch_compile", "torch_compile_max_autotune", "onnxruntime")  # tuner.peers.LABELS
#: speed-up over the fastest peer each stage must reach (ours faster by at least this factor)
GOALS = {"prefill": 1.4, "prefill-kv": 1.4, "decode": 1.3}


def tune_ours(model: str, stage: str, seq_len: int, kv_len: int, trials: int, repeat: int,
              work_dir: str):
    """Run ``tune run`` on one stage, every peer timed beside it; its :class:`tuner.session.RunSummary`."""
    from tuner.progress import Progress
    from tuner.session import RunOptions, TuneRun

    options = RunOptions(
        model=model, stage=stage, seq_len=seq_len, kv_len=kv_len, trials=trials, repeat=repeat,
        db=f"sqlite:///{os.path.join(work_dir, 'tune.db')}",
        artifact_dir=os.path.join(work_dir, "artifacts"), peers=PEERS[1:],
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


def stage_rows(stage: str, ours: float | None, peers: dict[str, float | None], metaschedule_s: float | None,
               label: str = "") -> list[Row]:
    """The rows of one stage: the goal against the fastest peer timed, then every contender reported.

    ``peers`` maps each peer of :data:`PEERS` to its median seconds (None: not timed);
    ``label`` qualifies the stage's rows (`` cold``).
    """
    from tuner.peers import LABELS

    what = f"{stage}{label} layer latency (s)"
    timed = {name: s for name, s in peers.items() if s}
    rows = []
    best = min(timed, key=timed.get) if timed else None
    if timed:
        rows.append(ratio_row(f"{what}, speed-up over the fastest peer", ours, timed[best], LABELS[best],
                              GOALS[stage], f"ratio >= {GOALS[stage]}", higher_is_better=False))
    else:
        rows.append(Row(f"{what}, speed-up over the fastest peer", ours, None, "no peer timed", None,
                        f"ratio >= {GOALS[stage]}", None))
    others = [(LABELS[name], s) for name, s in peers.items() if not timed or name != best] + (
        [("MetaSchedule tune_relax", metaschedule_s)] if metaschedule_s is not None else [])
    for name, anchor in others:
        rows.append(Row(f"{what}, speed-up over {name}", ours, anchor, name,
                        anchor / ours if anchor and ours else None, "reported", None))
    return rows


def cold_results(model: str, stage: str, seq_len: int, kv_len: int, artifact: str, repeat: int) -> dict:
    """Ours (the artifact of ``tune run``) and every installed peer timed with the weights evicted before each call.

    Each contender runs in a process of its own (:class:`tuner.contender.Contenders`),
    checked against the PyTorch reference first; before every timed call it writes twice
    the last-level cache (:func:`measure.roofline.llc_bytes`), so the layer's weights come
    from memory, as in a model whose other layers ran in between. ``repeat`` rounds;
    returns each contender's :class:`tuner.contender.ContenderResult` by name (``ours``
    and the names of :data:`PEERS`).
    """
    from extract import load_model
    from measure.roofline import llc_bytes
    from measure.threads import physical_cores
    from tuner.compile import local_program
    from tuner.contender import Contenders
    from tuner.peers import installed, layer_peer

    imported = load_model(model, stage, seq_len=seq_len, kv_len=kv_len)
    threads = physical_cores()
    builds = {"ours": partial(local_program, artifact, list(imported.inputs) + list(imported.params),
                              len(imported.inputs))}
    builds.update({name: partial(layer_peer, name, model, stage, seq_len, kv_len, 1, 0, threads)
                   for name in PEERS if installed(name)})
    with Contenders(builds, imported.reference_outputs(), cold_bytes=2 * llc_bytes()) as cold:
        cold.start()
        for _ in range(repeat):
            cold.time_round()
    return cold.results


def _peer_note(peer: dict) -> str:
    """One peer's outcome in words: its median and compile time, or why it was not timed."""
    from tuner.peers import LABELS

    label = LABELS.get(peer["name"], peer["name"])
    if peer["status"] != "ok":
        return f"{label} {peer['status']}, not timed ({peer['error']})"
    return (f"{label} {fmt(peer['median_s'])} s over {peer['repeats']} repeats, compile (build and first call) "
            f"{fmt(peer['compile_s'])} s, max abs error {fmt(peer['max_abs_error'], 2)}")


def layer_db_name(model: str, stage: str, seq_len: int, kv_len: int) -> str:
    """File name of the tuning database a run leaves in ``$BENCH_WORK_DIR``: named by what it tuned."""
    return f"layer-{model}-{stage}-{seq_len}-{kv_len}.db"


def run(quick: bool = False, trials: int | None = None, model: str | None = None,
        seq_len: int | None = None, kv_len: int | None = None, repeat: int = 10,
        stages: tuple[str, ...] = STAGES, metaschedule: bool = True, cold: bool = True) -> BenchResult:
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
            ms_s = None
            if metaschedule:
                imported = load_model(model, stage, seq_len=seq_len, kv_len=kv_len)
                ms_s = metaschedule_layer(imported, summary.measured_trials, target,
                                          os.path.join(stage_dir, "ms"), repeat)
            kernels = kernel_rows(summary, f"sqlite:///{os.path.join(stage_dir, 'tune.db')}", roofline)
            if os.environ.get("BENCH_WORK_DIR"):  # the later-compile benchmark's quick mode starts from it
                shutil.copyfile(os.path.join(stage_dir, "tune.db"), os.path.join(
                    os.environ["BENCH_WORK_DIR"], layer_db_name(model, stage, seq_len, kv_len)))
            peers = {name: summary.latency_s.get(name) for name in PEERS}
            per_stage[stage] = {"ours_s": ours, "peers_s": peers, "metaschedule_s": ms_s,
                                "peer_status": summary.peers,
                                "trials": summary.measured_trials, "rewrites": summary.graph["rewrites"],
                                "priced_s": summary.graph["predicted_latency_s"], "kernels": kernels,
                                "memory": summary.memory}
            memory = summary.memory  # peak of the run's processes over its weights (tuner.memory)
            result.rows.append(Row(f"{stage} run's peak memory (bytes), times the weights' bytes", memory["peak_bytes"],
                                   memory["weight_bytes"], "weights", memory["peak_to_weights"], "reported", None))
            result.rows += stage_rows(stage, ours, peers, ms_s)
            if cold and stage == "decode":
                try:
                    results = cold_results(model, stage, seq_len, kv_len, summary.artifact, repeat)
                except Exception as exc:  # noqa: BLE001 - the warm figures stand; the note says why cold has none
                    result.notes.append(f"{stage} cold: not timed ({type(exc).__name__}: {exc}).")
                    continue
                ours_cold = results.pop("ours")
                result.rows += stage_rows(stage, ours_cold.median_s, {n: r.median_s for n, r in results.items()},
                                          None, " cold")
                per_stage[stage]["cold"] = {"ours": ours_cold.as_json(),
                                            "peers": [r.as_json() for r in results.values()]}
    scaled = f" (below the full mode's {FULL_TRIALS})" if not quick and trials < FULL_TRIALS else ""
    result.notes += [
        f"{model}, float32, prefill {seq_len} tokens, prefill-kv {seq_len} over {kv_len}, decode over {kv_len}; "
        f"stages run: {', '.join(stages)}; ours: {trials} trials per workload{scaled}; "
        + ("MetaSchedule: the same total number of trials." if metaschedule else "MetaSchedule: not run."),
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
        result.notes.append(f"{stage} peers: " + "; ".join(_peer_note(p) for p in data["peer_status"]) + ".")
        if "cold" in data:
            result.notes.append(f"{stage} cold (weights evicted before each call, every contender in a process of "
                                "its own): " + _peer_note(data["cold"]["ours"]) + "; "
                                + "; ".join(_peer_note(p) for p in data["cold"]["peers"]) + ".")
    for row in result.rows:
        if row.met is False:
            goal = float(row.goal.split(">=")[1])
            result.notes.append(f"Not met: {row.what.split(',')[0]}: ours {fmt(row.ours)} s against "
                                f"{row.anchor_name} {fmt(row.anchor)} s; the goal needs ours at "
                                f"{fmt(row.anchor / goal)} s or less, {1 - row.anchor / goal / row.ours:.0%} less "
                                "time: the kernels with the largest share and the lowest fraction of roofline in "
                                "the stage's note above are where it would come from.")
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
    parser.add_argument("--no-cold", action="store_true",
                        help="skip the decode timing with the weights evicted before each call")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = parser.parse_args(argv)
    check_model_option(parser, args.model)
    return args


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.layer [--quick] [--trials N] [--stages S ...] [--json]``."""
    args = parse_args(argv)
    stages = tuple(args.stages or (("prefill",) if args.quick else STAGES))
    result = run(args.quick, args.trials, args.model, args.seq_len, args.kv_len, args.repeat,
                 stages, not (args.no_metaschedule or args.quick), not args.no_cold)
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

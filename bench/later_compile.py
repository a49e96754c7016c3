"""Later compile: a model with new shapes on a warm tuning database, against a cold run and MetaSchedule.

``python -m bench.later_compile [--quick] [--stages S ...] [--source-trials N] [--warm-trials N]
[--cold-trials N] [--json]``

One run, every step the product's own ``tune run`` (:class:`tuner.session.TuneRun`,
local RPC tracker and worker, a real SQLite database):

1. **source**: tune the source model (Qwen3-0.6B; prefill and decode) with
   ``source_trials`` trials per workload into a database; the run stores its cost model;
2. **warm, no trials**: on a copy of that database, compile the target model
   (Qwen3-1.7B: new shapes) with ``--trials 0``: nothing is
   measured, each kernel gets the schedule the stored cost model predicts fastest;
3. **warm**: on another copy, the target with ``warm_trials`` trials per workload;
4. **cold**: the target on a fresh database with ``cold_trials`` trials per workload;
5. **MetaSchedule**: ``tune_relax`` on the target layer after TVM's default
   legalization and fusion, ``cold_trials`` trials per task in all
   (:func:`bench.layer.metaschedule_layer`).

With a cold run, the source database's cost model is also judged on the cold run's
measured candidates of the workloads the source never measured (top-1 and pairwise
accuracy against a random ranking; the goals are the cost-model issue's, on unseen
workloads of the Qwen3 family).

With ``$BENCH_WORK_DIR`` set, the databases of a run stay there (``later-*.db``) for
``tune model eval`` and ``tune simulate``.

Figures are end-to-end layer latencies: ours as ``tune run`` times the compiled
program on the worker (median of repeats), MetaSchedule's with the VM's
``time_evaluator`` (median of repeats). Goals (the cost-model issue): warm with
64 trials no slower than MetaSchedule with 256 (``MetaSchedule / ours >= 1``);
``--trials 0`` within 15% of it (``MetaSchedule / ours >= 1 / 1.15``).

``--quick`` is a smoke run of the script that fits the suite's quick mode: source
``qwen3-tiny`` prefill at 8 tokens with 2 trials (the database the layer benchmark
leaves in ``$BENCH_WORK_DIR`` when it tuned that same model and shape), target ``qwen3-tiny`` at 16 tokens
(new shapes) with ``--trials 0`` only, against TVM's default build of the target
timed in the same run; no cold run and no MetaSchedule (``tune_relax`` takes about 7
minutes on one tiny stage on 2 cores), so the goals are not judged.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

from .common import BenchResult, Row, bench_parser, positive_int, print_result, ratio_row

NAME, TITLE = "later_compile", "Later compile: Qwen3-1.7B on a warm database against MetaSchedule"

FULL = {"source": ("qwen3-0.6b", 128), "target": ("qwen3-1.7b", 128), "kv_len": 512,
        "stages": ("prefill", "decode"), "source_trials": 64, "warm_trials": 64, "cold_trials": 256,
        "metaschedule": True}
QUICK = {"source": ("qwen3-tiny", 8), "target": ("qwen3-tiny", 16), "kv_len": 16,
         "stages": ("prefill",), "source_trials": 2, "warm_trials": None, "cold_trials": None,
         "metaschedule": False}
WITHIN = 1.15  # --trials 0 "within 15%" of the anchor


def tune(model: str, stage: str, seq_len: int, kv_len: int, trials: int, db_path: str, work: str, repeat: int):
    """One ``tune run`` into the SQLite file ``db_path``; its :class:`tuner.session.RunSummary`."""
    from tuner.progress import Progress
    from tuner.session import RunOptions, TuneRun

    options = RunOptions(model=model, stage=stage, seq_len=seq_len, kv_len=kv_len, trials=trials, repeat=repeat,
                         db=f"sqlite:///{db_path}", artifact_dir=os.path.join(work, "artifacts"))
    return TuneRun(options, Progress(quiet=True)).run()


def _copy(db_path: str, to: str) -> str:
    shutil.copyfile(db_path, to)  # the source run has finished: no WAL left to copy
    return to


def _keep_databases(work: str, quick: bool) -> None:
    """Copy this run's SQLite databases into ``$BENCH_WORK_DIR`` as ``later-NAME.db``, when it is set.

    The source database (``later-warm.db``) and the target runs' (``later-cold-STAGE.db`` and
    others) are what ``tune model eval`` and ``tune simulate`` read afterwards; the temporary
    directory is removed when the run ends. Quick mode keeps nothing.
    """
    keep_in = os.environ.get("BENCH_WORK_DIR")
    if quick or not keep_in:
        return
    for name in sorted(os.listdir(work)):
        if name.endswith(".db"):
            _copy(os.path.join(work, name), os.path.join(keep_in, f"later-{name}"))


def run(quick: bool = False, repeat: int = 10, overrides: dict | None = None) -> BenchResult:
    """Run the benchmark; see the module docstring.

    ``overrides`` replaces entries of the full configuration (``stages``,
    ``source_trials``, ``warm_trials``, ``cold_trials``): a run at smaller budgets
    keeps the protocol, and its notes say which budgets differ from the issue's.
    """
    from extract import load_model
    from tuner.kernels import kernels_of, lower_to_kernels
    from tuner.target import resolve_target

    from .layer import layer_db_name, metaschedule_layer

    cfg = QUICK if quick else dict(FULL, **(overrides or {}))
    (source, source_len), (target_model, target_len) = cfg["source"], cfg["target"]
    kv_len = cfg["kv_len"]
    start = time.time()
    result = BenchResult(NAME, TITLE)
    figures: dict[str, dict[str, float | None]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-later-") as work:
        warm_db = os.path.join(work, "warm.db")
        walls: dict[str, float] = {}
        predicted: dict[str, str] = {}
        ranking: dict[str, dict] = {}
        t0 = time.time()
        left_by_layer = os.path.join(os.environ.get("BENCH_WORK_DIR", ""),
                                     layer_db_name(source, "prefill", source_len, kv_len))
        if quick and os.environ.get("BENCH_WORK_DIR") and os.path.exists(left_by_layer):
            _copy(left_by_layer, warm_db)
            source_note = "the layer benchmark's database (the same source run)"
        else:
            for stage in cfg["stages"]:
                tune(source, stage, source_len, kv_len, cfg["source_trials"], warm_db, work, repeat)
            source_note = "run here"
        walls["source"] = time.time() - t0
        for stage in cfg["stages"]:
            runs = {"ours warm, --trials 0": (_copy(warm_db, os.path.join(work, f"zero-{stage}.db")), 0)}
            if cfg["warm_trials"]:
                runs[f"ours warm, {cfg['warm_trials']} trials"] = (
                    _copy(warm_db, os.path.join(work, f"warm-{stage}.db")), cfg["warm_trials"])
            if cfg["cold_trials"]:
                runs[f"ours cold, {cfg['cold_trials']} trials"] = (os.path.join(work, f"cold-{stage}.db"),
                                                                   cfg["cold_trials"])
            figures[stage] = {}
            for who, (db_path, trials) in runs.items():
                t0 = time.time()
                summary = tune(target_model, stage, target_len, kv_len, trials, db_path, work, repeat)
                figures[stage][who] = summary.latency_s["tuned"]
                if not cfg["metaschedule"]:
                    figures[stage].setdefault("TVM default build", summary.latency_s["tvm_default"])
                walls[f"{stage}: {who}"] = time.time() - t0
                sources = [k.source for k in summary.kernels]
                predicted[f"{stage}: {who}"] = (f"{sources.count('predicted')} predicted, "
                                                 f"{sources.count('measured')} measured, of {len(sources)}")
            if cfg["cold_trials"]:
                ranking[stage] = transfer_metrics(warm_db, os.path.join(work, f"cold-{stage}.db"))
            if cfg["metaschedule"]:
                imported = load_model(target_model, stage, seq_len=target_len, kv_len=kv_len)
                tasks = len(kernels_of(lower_to_kernels(imported.mod)))
                t0 = time.time()
                figures[stage]["MetaSchedule"] = metaschedule_layer(
                    imported, cfg["cold_trials"] * tasks, resolve_target().target,
                    os.path.join(work, "ms"), repeat)
                walls[f"{stage}: MetaSchedule"] = time.time() - t0
        _keep_databases(work, quick)
    result.rows = _rows(cfg, figures) + _ranking_rows(ranking)
    result.notes = [
        f"Source: {source} ({_shapes(cfg['stages'], source_len, kv_len)}) with {cfg['source_trials']} trials per "
        f"workload ({source_note}); target: {target_model} ({_shapes(cfg['stages'], target_len, kv_len)}; new "
        "shapes).",
        "Latencies in ms: ours timed by tune run on the worker, MetaSchedule by the VM's time_evaluator; medians "
        f"of {repeat} repeats.",
        "Wall time (s): " + "; ".join(f"{k} {v:.0f}" for k, v in walls.items()) + ".",
        "Kernels of the chosen program: compiled with the cost model's predicted schedule (no measurement of "
        "that workload), or with the fastest measured one (the target run's own, or the source run's where the "
        "workload is identical, e.g. attention with the same heads and KV cache): "
        + "; ".join(f"{k}: {v}" for k, v in predicted.items()) + ".",
    ]
    if ranking:
        result.notes.append(
            "Ranking rows: the source database's cost model (trained on all of it) scores the cold run's measured "
            "candidates of each workload the source never measured (tune model eval --train-db); workloads: "
            + "; ".join(f"{stage} {r['ours']['workloads']}" for stage, r in ranking.items()) + ".")
    scaled = {k: v for k, v in (overrides or {}).items() if not quick and FULL.get(k) != v}
    if scaled:
        result.notes.append(
            "Budgets changed from the issue's (" + ", ".join(f"{k} {FULL[k]}" for k in scaled) + ") to ("
            + ", ".join(f"{k} {v}" for k, v in scaled.items()) + "): the goals are judged at these budgets "
            "(warm at warm_trials against MetaSchedule at cold_trials per kernel), not at the issue's.")
    if quick:
        result.notes.append("Quick mode: a smoke run of the script on tiny shapes with --trials 0 only, against TVM's "
                            "default (untuned) build; MetaSchedule and the cold run are not run, so the goals are "
                            "not judged.")
    result.seconds = time.time() - start
    return result


def _shapes(stages, seq_len: int, kv_len: int) -> str:
    """The stages' token counts, e.g. ``"prefill 128 tokens; decode 1 token over a KV cache of 512"``."""
    from extract.config import stage_tokens

    parts = []
    for stage in stages:
        new, past = stage_tokens(stage, seq_len, kv_len)
        parts.append(f"{stage} {new} token{'s' * (new != 1)}" + (f" over a KV cache of {past}" if past else ""))
    return "; ".join(parts)


def _rows(cfg: dict, figures: dict[str, dict[str, float | None]]) -> list[Row]:
    rows = []
    if not cfg["metaschedule"]:  # quick: reported against TVM's default build, no goal judged
        for stage, fig in figures.items():
            anchor = _ms(fig.get("TVM default build"))
            for who, value in fig.items():
                if who != "TVM default build":
                    speedup = anchor / _ms(value) if anchor and value else None
                    rows.append(Row(f"{stage} layer latency (ms), {who}", _ms(value), anchor,
                                    "TVM default build (untuned)", speedup, "reported (quick: no anchor of the goal)",
                                    None))
        return rows
    label = f"MetaSchedule tune_relax @{cfg['cold_trials']}/task"
    for stage, fig in figures.items():
        anchor = _ms(fig.get("MetaSchedule"))
        for who, value in fig.items():
            if who == "MetaSchedule":
                continue
            if who.startswith("ours cold"):
                speedup = anchor / _ms(value) if anchor and value else None
                rows.append(Row(f"{stage} layer latency (ms), {who}", _ms(value), anchor, label, speedup,
                                "reported", None))
                continue
            goal = 1 / WITHIN if "--trials 0" in who else 1.0
            rows.append(ratio_row(f"{stage} layer latency (ms), {who}", _ms(value), anchor, label, goal,
                                  f"anchor/ours >= {goal:.2f}", higher_is_better=False))
    return rows


def transfer_metrics(source_db: str, target_db: str) -> dict[str, dict]:
    """Ranking metrics of the default cost model trained on every measurement of the SQLite file ``source_db``,
    judged on the workloads of ``target_db`` that ``source_db`` never measured, beside a random ranking.

    Returns ``{"ours": metrics, "random": metrics}`` (``tuner.cost_model.evaluate.evaluate_transfer``'s figures).
    """
    from database import open_database
    from tuner.cli.model import select_target
    from tuner.cost_model.dataset import load_dataset
    from tuner.cost_model.evaluate import evaluate_transfer
    from tuner.cost_model.xgb import DEFAULT_OBJECTIVE

    datasets = []
    for path in (source_db, target_db):
        db = open_database(f"sqlite:///{path}")
        try:
            record, target = select_target(db, None, None)
            datasets.append(load_dataset(db, record.target_hash, target))
        finally:
            db.close()
    ours = f"xgb:{DEFAULT_OBJECTIVE}"
    out = evaluate_transfer(*datasets, models=(ours, "random"))
    return {"ours": out[ours], "random": out["random"]}


def _ranking_rows(ranking: dict[str, dict]) -> list[Row]:
    """Top-1 and pairwise accuracy of the source's model on the target's unseen workloads, against random."""
    from .cost_model import GOALS

    rows = []
    for stage, r in ranking.items():
        for metric, label in (("top1", "top-1 score"), ("pairwise", "pairwise accuracy")):
            ours, anchor = r["ours"][metric], r["random"][metric]
            rows.append(Row(f"{stage}: {label} of the source's model on the target's unseen workloads", ours, anchor,
                            "random ranking", ours / anchor if ours is not None and anchor else None,
                            f"ours >= {GOALS[metric]}", None if ours is None else ours >= GOALS[metric]))
    return rows


def _ms(seconds: float | None) -> float | None:
    return seconds * 1e3 if seconds is not None else None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse ``python -m bench.later_compile``'s command line; a bad one exits 2 with argparse's error."""
    parser = bench_parser("later_compile", __doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="tiny shapes, --trials 0 only, no MetaSchedule (a smoke run)")
    parser.add_argument("--repeat", type=positive_int, default=10, help="timing repeats (medians)")
    parser.add_argument("--stages", nargs="+", choices=FULL["stages"], help="stages (default: prefill and decode)")
    for name, help_text in (("source", "per workload of the source model"), ("warm", "of the warm run per workload"),
                            ("cold", "of the cold run per workload, and MetaSchedule's per kernel")):
        parser.add_argument(f"--{name}-trials", type=positive_int, help=f"trials {help_text} (default "
                            f"{FULL[name + '_trials']}; smaller budgets are stated in the notes)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = parser.parse_args(argv)
    if args.quick and any(v is not None for v in (args.stages, args.source_trials, args.warm_trials,
                                              args.cold_trials)):
        parser.error("--quick takes no budget or stage options")
    return args


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.later_compile [--quick] [--json]``."""
    args = parse_args(argv)
    overrides = {k: v for k, v in (("stages", tuple(args.stages) if args.stages else None),
                                   ("source_trials", args.source_trials), ("warm_trials", args.warm_trials),
                                   ("cold_trials", args.cold_trials)) if v is not None}
    result = run(quick=args.quick, repeat=args.repeat, overrides=overrides)
    result.command = "python -m bench.later_compile " + " ".join(argv if argv is not None else sys.argv[1:])
    print_result(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

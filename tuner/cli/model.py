"""``tune model``: train, evaluate and list the cost model versions of a tuning database."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from .existing import DbOption, existing_database
from .figures import by_kind_lines, emit, fmt, with_interval, workloads_text

model_app = typer.Typer(help="Train, evaluate and list cost models.", pretty_exceptions_show_locals=False,
                        no_args_is_help=True)

TargetOption = Annotated[str | None, typer.Option(help='Target as TVM JSON, as given to tune run. Default: this CPU.')]
KeyOption = Annotated[str | None, typer.Option(
    envvar="TVM_TRACKER_KEY", help="RPC key of the device pool (default: the embedded worker's).")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]


def select_target(db, target: str | None, key: str | None, where: str = "this database"):
    """The ``TargetRecord`` and TVM target chosen as ``tune run`` chooses them; it must have measurements in ``db``.

    ``where`` names ``db`` in the error (e.g. "the --train-db database").

    Raises
    ------
    ValueError
        The target was never measured in this database (the message lists those that were).
    """
    from tuner.target import resolve_target

    resolved = resolve_target(target, key)
    record, tvm_target = resolved.record, resolved.target
    known = db.targets()
    if record not in known:
        listed = "; ".join(f"--target '{t.target_json}' --key {t.key}" for t in known) or "none"
        raise ValueError(f"no measurements for target {record.target_json} key {record.key} in {where} "
                         f"(measured targets: {listed})")
    return record, tvm_target


def _same_database(a, b) -> bool:
    """Whether two parsed URLs name one database (SQLite files, ``file:`` URIs included, by their real path)."""
    from database.session import sqlite_file

    path_a, path_b = sqlite_file(a), sqlite_file(b)
    if path_a and path_b:
        return os.path.realpath(path_a) == os.path.realpath(path_b)
    return a == b


def load_training_set(train_db: str, db: str | None, target: str | None, key: str | None):
    """The successful measurements of ``--train-db`` for the chosen target, as a ``Dataset``.

    Checked before ``--db`` is read, so a wrong training database fails at once.

    Raises
    ------
    ValueError
        ``--train-db`` is empty, is the same URL as ``--db``, does not exist, or
        holds no successful measurement of the target.
    """
    from database.session import resolve_url
    from tuner.cost_model.dataset import load_dataset

    if not train_db.strip():
        raise ValueError("--train-db is empty: give the URL of the database to train on")
    with existing_database(train_db, option="--train-db") as database:
        if _same_database(resolve_url(train_db), resolve_url(db)):
            raise ValueError("--train-db is the same database as --db: nothing would be unseen")
        record, tvm_target = select_target(database, target, key, where="the --train-db database")
        train = load_dataset(database, record.target_hash, tvm_target)
    if not len(train):
        raise ValueError("the --train-db database has no successful measurement of this target")
    return train




ObjectiveOption = Annotated[str | None, typer.Option(
    help="XGBoost objective: rank:pairwise (default), reg:latency, rank:ndcg or reg:normalized.")]


def _objective(objective: str | None) -> str:
    """The objective given, else the default (``ValueError`` naming the choices for an unknown one)."""
    from tuner.cost_model.xgb import DEFAULT_OBJECTIVE, OBJECTIVES

    objective = objective or DEFAULT_OBJECTIVE
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    return objective


@model_app.command("pretrain")
def pretrain_command(
    file: Annotated[str | None, typer.Argument(
        help="The data set file (default: the repository's, tuner/cost_model/pretrained/dataset.jsonl.gz).")] = None,
    out: Annotated[str | None, typer.Option(
        help="Where to write the model (default: the package's pretrained model, "
             "tuner/cost_model/pretrained/model.json.gz).")] = None,
    objective: ObjectiveOption = None,
    seed: Annotated[int, typer.Option(help="Seed of the boosters.")] = 0,
    as_json: JsonOption = False,
) -> None:
    """Train the shipped pretrained cost model from a data set file (what `tune run` starts from without its own)."""
    from tuner.cost_model.shipped import DATASET_PATH, PRETRAINED_PATH, pretrain
    from tuner.progress import Progress

    progress = Progress(quiet=as_json)
    info = pretrain(file or DATASET_PATH, out or PRETRAINED_PATH, _objective(objective), seed, progress.note)
    emit(as_json, {"out": str(out or PRETRAINED_PATH), **info},
          [f"{out or PRETRAINED_PATH}: {info['objective']}, {info['records']} records of {info['workloads']} "
           f"workloads ({info['skipped']} skipped), feature version {info['feature_version']}"])


@model_app.command("train")
def train_command(
    db: DbOption = None, target: TargetOption = None, key: KeyOption = None,
    objective: ObjectiveOption = None,
    seed: Annotated[int, typer.Option(help="Seed of the boosters.")] = 0,
    peak_gflops: Annotated[float | None, typer.Option(
        "--peak-gflops", help="Roofline fallback: peak GFLOP/s (default: measured on this machine).")] = None,
    bandwidth_gbs: Annotated[float | None, typer.Option(
        "--bandwidth-gbs", help="Roofline fallback: memory bandwidth in GB/s (default: measured).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Train a cost model on every successful measurement of the target and store it as a new version.

    With too few measurements nothing is stored and kernels stay priced by the
    analytical roofline model; the output says so.
    """
    from tuner.cost_model.dataset import load_dataset
    from tuner.cost_model.roofline import MIN_TRAIN_RECORDS, RooflineCostModel
    from tuner.cost_model.store import train_version

    objective = _objective(objective)
    with existing_database(db) as database:
        record, tvm_target = select_target(database, target, key)
        data = load_dataset(database, record.target_hash, tvm_target)
        if len(data) < MIN_TRAIN_RECORDS:
            if peak_gflops is not None and bandwidth_gbs is not None:
                roof = RooflineCostModel(peak_gflops * 1e9, bandwidth_gbs * 1e9)
            else:
                roof = RooflineCostModel.measured()
            msg = (f"only {len(data)} successful measurements (need {MIN_TRAIN_RECORDS}): no model stored; "
                   f"kernels are priced by the {roof.describe()}")
            emit(as_json, {"trained": False, "records": len(data), "fallback": "roofline",
                            "peak_flops_per_s": roof.peak_flops_per_s,
                            "bandwidth_bytes_per_s": roof.bandwidth_bytes_per_s, "message": msg}, [msg])
            return
        out = train_version(database, record.target_hash, data, objective, seed=seed)
    m = out["metrics"] or {}
    emit(as_json, {"trained": True, "target_hash": record.target_hash, **out},
          [f"stored cost model version {out['version']}: {objective}, {out['records']} records, "
           f"{out['workloads']} workloads",
           f"held-out workloads: top-1 {fmt(m.get('top1'))}, top-5 {fmt(m.get('top5'))}, "
           f"pairwise {fmt(m.get('pairwise'))}, Spearman {fmt(m.get('spearman'))}"])


#: the row of ``tune model eval`` that judges the measurements themselves
#: (:func:`tuner.cost_model.evaluate.repeat_agreement`)
REPEATS_ROW = "repeat halves"


@model_app.command("eval")
def eval_command(
    db: DbOption = None, target: TargetOption = None, key: KeyOption = None,
    models: Annotated[str | None, typer.Option(
        help="Comma-separated models to compare (default: all): xgb:<objective>, random-forest, linear, "
        "random.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the models and the random ranking.")] = 0,
    trees: Annotated[int | None, typer.Option(help="Trees of the XGBoost models (default: the cost model's).")] = None,
    max_bin: Annotated[int | None, typer.Option(
        help="Histogram bins per feature of the XGBoost models (default: the cost model's).")] = None,
    min_candidates: Annotated[int, typer.Option(
        "--min-candidates", help="Judge only workloads with at least this many measured candidates (every workload is "
        "still trained on).")] = 2,
    train_db: Annotated[str | None, typer.Option(
        "--train-db", help="Train on every measurement of this database instead and judge on the workloads of --db it "
        "never measured (default: hold out workloads of --db in turn). --target and --key choose the target in both "
        "databases.")] = None,
    hold_out_arch: Annotated[str | None, typer.Option(
        "--hold-out-arch", help="Judge on a data set file's workloads of these models (comma-separated name prefixes, "
        "e.g. llama,qwen3-1.7b, each in turn), trained on the workloads of none of them.")] = None,
    hold_out_cpu: Annotated[str | None, typer.Option(
        "--hold-out-cpu", help="Judge on a data set file's records measured on a CPU whose description contains this "
        "text, trained on the others.")] = None,
    dataset: Annotated[str | None, typer.Option(
        help="The data set file of --hold-out-arch/--hold-out-cpu (default: the repository's).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Judge cost models on held-out workloads: top-1, top-5, pairwise accuracy, Spearman, each with its 95% bootstrap interval over workloads; and the measurements themselves (repeat halves)."""  # noqa: E501 - one line: `tune model --help` lists its first paragraph with line breaks kept
    from tuner.cost_model.dataset import load_dataset, load_repeats
    from tuner.cost_model.evaluate import (
        CONFIDENCE,
        MODELS,
        evaluate,
        evaluate_transfer,
        repeat_agreement,
        unseen_workloads,
    )

    chosen = tuple(m.strip() for m in models.split(",")) if models else MODELS
    unknown = [m for m in chosen if m not in MODELS]
    if unknown:
        raise ValueError(f"unknown model {unknown[0]!r}; choose from {', '.join(MODELS)}")
    for option, value in (("--trees", trees), ("--max-bin", max_bin), ("--min-candidates", min_candidates)):
        if value is not None and value < 2:
            raise ValueError(f"{option} must be at least 2, got {value}")
    xgb_params = {k: v for k, v in (("n_estimators", trees), ("max_bin", max_bin)) if v is not None}
    if hold_out_arch or hold_out_cpu:
        from .heldout import heldout_eval

        heldout_eval(dataset, hold_out_arch, hold_out_cpu, chosen, seed, min_candidates, xgb_params, as_json)
        return
    train = None if train_db is None else load_training_set(train_db, db, target, key)
    with existing_database(db) as database:
        record, tvm_target = select_target(database, target, key)
        data = load_dataset(database, record.target_hash, tvm_target)
        repeats = load_repeats(database, record.target_hash)
    extra = {}
    judged = None if train is None else unseen_workloads(train, data)
    if train is not None:
        _check_judged(data.groups[judged], min_candidates)
        results = evaluate_transfer(train, data, chosen, seed=seed, xgb_params=xgb_params,
                                    min_candidates=min_candidates)
        unseen = len(set(data.groups[judged].tolist()))
        extra = {"train_records": len(train), "train_workloads": train.n_workloads, "unseen_workloads": unseen,
                 "unseen_records": int(judged.sum()),
                 "judged_records": _judged_rows(data.groups[judged], min_candidates)}
        head = (f"models trained on the --train-db database ({len(train)} measured candidates of "
                f"{train.n_workloads} workloads), judged on the {unseen} --db workloads it never measured "
                f"({int(judged.sum())} candidates):")
    else:
        if data.n_workloads < 2:
            raise ValueError(f"evaluation holds out whole workloads and needs measurements of at least 2, "
                             f"this target has {data.n_workloads}")
        _check_judged(data.groups, min_candidates)
        results = evaluate(data, chosen, seed=seed, xgb_params=xgb_params, min_candidates=min_candidates)
        head = "held-out workloads:"
    agreement = repeat_agreement(repeats, data, judged, min_candidates)
    shown = {**results, REPEATS_ROW: agreement}
    judged_n = next(iter(results.values()))["workloads"]
    lines = [f"{len(data)} measured candidates of {data.n_workloads} workloads ({data.skipped} skipped); {head}",
             f"judged: {workloads_text(judged_n)} with at least {min_candidates} candidates; each figure is the mean "
             + (f"over them [its {CONFIDENCE:.0%} bootstrap interval over workloads]" if judged_n > 1 else
                "(no interval: it needs 2 workloads or more)"),
             f"{'model':<20} " + " ".join(f"{h:>19}" for h in ("top-1", "top-5", "pairwise", "spearman"))]
    lines += [f"{name:<20} " + " ".join(f"{with_interval(r, m):>19}" for m in ("top1", "top5", "pairwise", "spearman"))
              for name, r in shown.items()]
    lines.append(f"({REPEATS_ROW}: how well two measurements agree: the candidates ranked by the first half of "
                 f"their repeat times, judged by the second half; {workloads_text(agreement['workloads'])})")
    lines += by_kind_lines(shown)
    emit(as_json, {"target_hash": record.target_hash, "records": len(data), "workloads": data.n_workloads,
                    "skipped": data.skipped, "min_candidates": min_candidates, "confidence": CONFIDENCE, **extra,
                    "models": results, "repeat_agreement": agreement}, lines)


def _workload_sizes(groups):
    """For each candidate (an entry of ``groups``, its workload hash), how many candidates its workload has."""
    import numpy as np

    _, inverse, counts = np.unique(groups, return_inverse=True, return_counts=True)
    return counts[inverse]


def _check_judged(groups, min_candidates: int) -> None:
    """Raise ValueError when no workload among ``groups`` (one entry per candidate) has ``min_candidates`` candidates.

    Nothing is raised for no candidates at all: the evaluation says why there is nothing to judge.
    """
    if not len(groups):
        return
    most = int(_workload_sizes(groups).max())
    if most < min_candidates:
        raise ValueError(f"no judged workload has {min_candidates} or more measured candidates "
                         f"(the most is {most}): lower --min-candidates")


def _judged_rows(groups, min_candidates: int) -> int:
    """Candidates (entries of ``groups``, one per candidate) of the workloads with ``min_candidates`` or more."""
    return int((_workload_sizes(groups) >= min_candidates).sum())





@model_app.command("list")
def list_command(db: DbOption = None, as_json: JsonOption = False) -> None:
    """Stored cost model versions, newest first (the newest compatible one warm-starts a run)."""
    with existing_database(db) as database:
        versions = database.cost_model_versions()
    lines = [f"{'id':>4} {'target':<12} {'records':>8} {'objective':<15} {'top-1':>6} {'created':<20} feature version"]
    for v in versions:
        m = v["metrics"]
        held = m.get("heldout") or {}
        lines.append(f"{v['id']:>4} {v['target_hash'][:12]:<12} {v['record_count']:>8} "
                     f"{m.get('objective', '-'):<15} {fmt(held.get('top1')):>6} {(v['created_at'] or '')[:19]:<20} "
                     f"{v['feature_version']}")
    emit(as_json, {"versions": versions}, lines if versions else ["no cost model stored"])

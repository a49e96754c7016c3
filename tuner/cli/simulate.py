"""``tune simulate``: replay a database's measurements to compare search strategies without hardware."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from .existing import DbOption, existing_database
from .model import JsonOption, KeyOption, TargetOption, load_training_set, select_target


def _floats(text: str, what: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{what} must be comma-separated numbers, got {text!r}") from None


def simulate_command(
    db: DbOption = None, target: TargetOption = None, key: KeyOption = None,
    strategies: Annotated[str, typer.Option(
        help="Comma-separated: random, cold (model from this workload only), warm (model from the other workloads "
        "first), shipped (the package's pretrained model first; only workloads it was not trained on are "
        "replayed).")] = "random,cold,warm",
    batch_size: Annotated[str, typer.Option("--batch-size", help="Batch sizes to try, comma-separated.")] = "8",
    explore: Annotated[str, typer.Option(help="Exploration shares to try, comma-separated, each in [0, 1].")] = "0.25",
    seeds: Annotated[int, typer.Option(help="Replays per strategy (seeds of the exploration draw).")] = 3,
    trials: Annotated[int | None, typer.Option(help="Trials to report (default: the largest pool).")] = None,
    train_db: Annotated[str | None, typer.Option(
        "--train-db", help="warm starts from a model trained on this database and only the workloads of --db it never "
        "measured are replayed (default: a model trained on the other workloads of --db). --target and --key choose "
        "the target in both databases.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Replay the target's recorded measurements under each strategy and print best-so-far curves.

    A strategy may only pick candidates that were measured; the figure after t
    trials is the pool's best latency divided by the best found in t picks,
    averaged over workloads and seeds (1.0: the best was found). Then, per
    strategy, the trials needed to come within 5% of each pool's best (mean over
    workloads with its 95% interval, median) and its ratio to random's.
    """
    from tuner.cost_model.xgb import XGBCostModel
    from tuner.search.simulate import STRATEGIES, load_pools, replay_curves

    names = [s.strip() for s in strategies.split(",") if s.strip()]
    bad = [s for s in names if s not in STRATEGIES]
    if bad:
        raise ValueError(f"unknown strategy {bad[0]!r}; choose from {', '.join(STRATEGIES)}")
    batches = [int(b) for b in _floats(batch_size, "--batch-size")]
    shares = _floats(explore, "--explore")
    for bad, message in ((any(b < 1 for b in batches), f"--batch-size must be at least 1, got {batch_size}"),
                         (any(not 0 <= e <= 1 for e in shares), f"--explore must lie within [0, 1], got {explore}"),
                         (seeds < 1, f"--seeds must be at least 1, got {seeds}"),
                         (trials is not None and trials < 1, f"--trials must be at least 1, got {trials}")):
        if bad:
            raise ValueError(message)
    grid = [("random", b, 1.0) for b in batches[:1] if "random" in names]
    grid += [(n, b, e) for n in names if n != "random" for b in batches for e in shares]
    train = None if train_db is None else load_training_set(train_db, db, target, key)
    with existing_database(db) as database:
        record, tvm_target = select_target(database, target, key)
        pools = load_pools(database, record.target_hash, tvm_target)
    base, extra, scope = None, {}, f"{len(pools)} workloads"
    if train is not None:
        known = set(train.groups.tolist())
        replayed = [p for p in pools if p.workload_hash not in known]
        if not replayed:
            raise ValueError("every workload of --db is also in the --train-db database: nothing unseen to replay")
        extra = {"train_records": len(train), "train_workloads": train.n_workloads, "db_workloads": len(pools)}
        scope = (f"{len(replayed)} of the {len(pools)} --db workloads, those the --train-db database never "
                 f"measured" + ("; warm starts from a model trained on --train-db" if "warm" in names else ""))
        pools = replayed
        if "warm" in names:
            base = XGBCostModel().fit(train.X, train.latency_s, train.groups)
    shipped = None
    if "shipped" in names:
        shipped, seen = shipped_model_and_workloads()
        unseen = [p for p in pools if p.workload_hash not in seen]
        if not unseen:
            raise ValueError("the shipped model was trained on every workload of --db: nothing unseen to replay")
        scope += f"; {len(unseen)} of them unseen by the shipped model, the only ones replayed"
        extra["shipped_unseen_workloads"] = len(unseen)
        pools = unseen
    largest = max(len(p.latency_s) for p in pools)  # every replay has found every best by then
    runs = replay_curves(pools, grid, seeds=seeds, trials=max(trials or 0, largest), warm_base=base, shipped=shipped)
    shown = trials or largest
    curves = {name: [float(v) for v in c.mean(axis=(0, 1))[:shown]] for name, c in runs.items()}
    within = trials_to_within_table(runs, pools)
    if as_json:
        sys.stdout.write(json.dumps({"target_hash": record.target_hash, "workloads": len(pools), **extra,
                                     "seeds": seeds, "curves": curves, "trials_to_within_5pct": within}) + "\n")
        return
    n = len(next(iter(curves.values())))
    points = sorted({t for t in (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128) if t <= n} | {n})
    typer.echo(f"{scope}; best latency found / best in the pool after t trials, mean of {seeds} seeds")
    typer.echo(f"{'strategy':<22}" + "".join(f"{'t=' + str(t):>8}" for t in points))
    for name, values in curves.items():
        typer.echo(f"{name:<22}" + "".join(f"{values[t - 1]:>8.3f}" for t in points))
    typer.echo(f"trials to within 5% of each pool's best (mean over {len(pools)} workloads, its 95% interval; "
               f"median; mean against random's)")
    for name, row in within.items():
        interval = "" if row["interval"] is None else f" [{row['interval'][0]:.1f}, {row['interval'][1]:.1f}]"
        ratio = "" if row["to_random"] is None else f"  {row['to_random']:.2f}x random"
        typer.echo(f"{name:<22}{row['mean']:>8.1f}{interval:<16} median {row['median']:.1f}{ratio}")


def trials_to_within_table(runs: dict, pools: list) -> dict[str, dict]:
    """Per strategy, the trials to within 5% of each pool's best: ``mean``, ``interval`` (95%, bootstrap over
    workloads), ``median``, ``to_random`` (mean over random's mean) and ``per_workload`` (workload hash to trials).
    """
    import numpy as np

    from tuner.cost_model.evaluate import mean_interval
    from tuner.search.simulate import trials_to_within

    per = {name: trials_to_within(c) for name, c in runs.items()}
    random = next((v for name, v in per.items() if name.startswith("random ")), None)
    out = {}
    for name, values in per.items():
        mean = float(np.mean(values))
        out[name] = {"mean": mean, "interval": mean_interval(list(values)), "median": float(np.median(values)),
                     "to_random": None if random is None else mean / float(np.mean(random)),
                     "per_workload": {p.workload_hash: float(v) for p, v in zip(pools, values, strict=True)}}
    return out


def shipped_model_and_workloads():
    """The package's pretrained model and the workload hashes of the data set file it was trained on.

    Raises
    ------
    ValueError
        No pretrained model, or one not trained from the package's data set file
        (then which workloads it saw is unknown).
    """
    from database.dataset_file import read_dataset
    from tuner.cost_model.shipped import DATASET_PATH, load_shipped, pretrained_path

    path = pretrained_path()
    shipped = load_shipped(path) if path is not None else None
    if shipped is None:
        raise ValueError("the shipped strategy needs a pretrained model, and there is none "
                         "(`tune model pretrain` writes it; TUNE_PRETRAINED=off turns it off)")
    data = read_dataset(DATASET_PATH)
    if data["header"].get("sha256") != shipped.info.get("dataset_sha256"):
        raise ValueError(f"the pretrained model at {path} was not trained from {DATASET_PATH.name}: which "
                         f"workloads it saw is unknown, so the shipped strategy cannot be judged on unseen ones")
    return shipped.model, {c["workload_hash"] for c in data["candidate"]}

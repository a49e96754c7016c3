"""``tune dataset``: grow the cost model's data set (collect) and move it to and from its file (export, import)."""

from __future__ import annotations

from typing import Annotated

import typer

from .existing import DbOption
from .figures import emit
from .model import JsonOption, KeyOption, TargetOption

dataset_app = typer.Typer(help="Collect, export and import the cost model's data set.",
                          pretty_exceptions_show_locals=False, no_args_is_help=True)


@dataset_app.command("collect")
def collect_command(
    db: DbOption = None,
    budget: Annotated[int, typer.Option(
        help="Measured candidates per workload and target (the default schedule included).")] = 16,
    models: Annotated[list[str] | None, typer.Option(
        "--models", help="Built-in models to draw workloads from (repeat the option; default: every shipped "
        "architecture and size but the -tiny ones).")] = None,
    time_limit: Annotated[float | None, typer.Option(
        "--time-limit", help="Stop after this many seconds (default: when every source is measured).")] = None,
    candidates: Annotated[int, typer.Option(help="Candidate programs per source from the e-graph.")] = 4,
    batch_size: Annotated[int, typer.Option(
        "--batch-size", help="Candidates measured between cost-model updates.")] = 8,
    confirm_top: Annotated[int, typer.Option(
        "--confirm-top", help="Fastest candidates per workload measured twice more (0: none).")] = 3,
    seed: Annotated[int, typer.Option(help="Seed of weights and of the search.")] = 0,
    target: TargetOption = None,
    tracker: Annotated[str | None, typer.Option(
        help="RPC tracker HOST:PORT to measure through (default: a local tracker and worker).")] = None,
    key: KeyOption = None,
    as_json: JsonOption = False,
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q", help="Print nothing but errors and the --json output.")] = False,
) -> None:
    """Measure schedules of workloads from every shipped model, stage and size into a database (resumable)."""
    from dataclasses import asdict

    from tuner.dataset.collect import CollectOptions, Collector
    from tuner.dataset.plan import default_plan
    from tuner.progress import Progress

    options = CollectOptions(db=db, budget=budget, models=tuple(models or ()), time_limit_s=time_limit,
                             candidates=candidates, batch_size=batch_size, confirm_top=confirm_top, seed=seed,
                             target=target, tracker=tracker, key=key)
    plan = default_plan(list(options.models))
    summary = Collector(options, plan, Progress(quiet=quiet)).run()
    emit(as_json, asdict(summary), [] if quiet else [
        f"{len(summary.sources)} of {len(plan)} sources done, {summary.measured} candidates measured now over "
        f"{summary.workloads} workloads; stopped: {summary.stop_reason}"])


@dataset_app.command("export")
def export_command(
    file: Annotated[str, typer.Argument(help="The data set file to write (gzip JSON lines; replaced atomically).")],
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Write every measurement of the database to a data set file (refused if the file holds records the
    database lacks: import it first)."""
    from database.dataset_file import export_dataset
    from tuner.cost_model.xgb import FEATURE_VERSION

    from .existing import existing_database

    with existing_database(db) as database:
        counts = export_dataset(database, file, FEATURE_VERSION)
    emit(as_json, counts, [f"{file}: {counts['records']} records of {counts['candidates']} candidates over "
                           f"{counts['workloads']} workloads"])


@dataset_app.command("import")
def import_command(
    file: Annotated[str, typer.Argument(help="A data set file written by `tune dataset export`.")],
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Add a data set file's records to the database (idempotent; existing records are kept)."""
    from database import DatabaseError, open_database
    from database.dataset_file import import_dataset, read_dataset

    read_dataset(file)  # a bad file is refused before the database is created or opened
    try:
        database = open_database(db)
    except DatabaseError as exc:
        raise ValueError(f"--db: {exc}") from None
    try:
        counts = import_dataset(database, file)
    finally:
        database.close()
    emit(as_json, counts, [f"{counts['records']} records of {counts['workloads']} workloads: "
                           f"{counts['measure_results']} measurements added, {counts['skipped']} already present, "
                           f"{counts['sessions']} sessions added"])


@dataset_app.command("stats")
def stats_command(
    file: Annotated[str, typer.Argument(help="A data set file.")],
    as_json: JsonOption = False,
) -> None:
    """What a data set file holds: records, workloads, and records per CPU and model."""
    from database.dataset_file import dataset_stats

    stats = dataset_stats(file)
    lines = [f"{file}: format {stats['format_version']}, features {stats['feature_version']}"]
    lines += [f"  {name:<12} {stats[name]:>8}"
              for name in ("records", "ok_records", "candidates", "workloads", "targets", "sessions")]
    lines += [f"  {group:<8} {name:<40} {count:>8}"
              for group in ("cpu", "model", "op_kind") for name, count in sorted(stats[group].items())]
    emit(as_json, stats, lines)

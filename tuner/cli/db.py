"""``tune db``: migrate and inspect the tuning database."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from .existing import DbOption, existing_database

db_app = typer.Typer(help="Migrate and inspect the tuning database.", pretty_exceptions_show_locals=False,
                     no_args_is_help=True)


@db_app.command("upgrade")
def upgrade_command(db: DbOption = None) -> None:
    """Bring the database to the current schema (the only command that migrates)."""
    from database import DatabaseError, upgrade

    try:
        revision = upgrade(db)
    except DatabaseError as exc:  # name the option, as the other commands do
        raise ValueError(f"--db: {exc}") from None
    typer.echo(f"database schema at revision {revision}")


@db_app.command("stats")
def stats_command(
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Row counts per table."""
    with existing_database(db) as database:
        stats = database.stats()
        url = database.url_display
    if as_json:
        sys.stdout.write(json.dumps({"db": url, "rows": stats}) + "\n")
        return
    typer.echo(url)
    for table, count in stats.items():
        typer.echo(f"  {table:<22} {count:>10}")


@db_app.command("best")
def best_command(
    model: Annotated[str | None, typer.Option(
        help="A model as given to `tune run` (a config or ONNX path in any spelling, a built-in name), "
             "a model or content hash, or a prefix of one of at least 8 hex digits: its workloads.")] = None,
    workload: Annotated[str | None, typer.Option(help="A workload hash or a prefix of one.")] = None,
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """The best measured schedule per workload and target (median seconds, GFLOP/s, trials)."""
    from database import sha256_text

    from ..model_ref import ModelLookupError, resolve_model
    from .errors import fail

    if model is None and workload is None:
        fail("name what to show: --model MODEL or --workload HASH")
    with existing_database(db) as database:
        try:
            hashes = None if model is None else resolve_model(database.recorded_models(), model)
        except ModelLookupError as exc:
            fail(str(exc))
        workloads = database.find_workloads(model_hashes=hashes, workload=workload)
        rows = []
        for target in database.targets():
            for w in workloads:
                best = database.best(w.workload_hash, target.target_hash)
                trials = len(database.measured_candidates(w.workload_hash, target.target_hash))
                if best is None and trials == 0:
                    continue
                candidate, median_s = best if best else (None, None)
                rows.append({
                    "workload": w.name, "workload_hash": w.workload_hash, "op_kind": w.op_kind,
                    "target": json.loads(target.target_json), "key": target.key, "trials": trials,
                    "median_s": median_s,
                    "gflops": w.flops / median_s / 1e9 if median_s and w.flops else None,
                    "candidate_hash": candidate.candidate_hash if candidate else None,
                    "trace_sha256": sha256_text(candidate.trace_json) if candidate else None,
                })
        url = database.url_display
    if not workloads:
        fail(f"no workload matches {'--model ' + model if model else '--workload ' + str(workload)} in {url}")
    if as_json:
        sys.stdout.write(json.dumps({"db": url, "best": rows}) + "\n")
        return
    typer.echo(url)
    for r in rows:
        latency = f"{r['median_s'] * 1e6:10.2f} us" if r["median_s"] else "    no time"
        gflops = f"{r['gflops']:9.2f} GFLOP/s" if r["gflops"] else ""
        typer.echo(f"  {r['workload']:<32} {r['workload_hash'][:16]}  {r['key']:<10} {latency} "
                   f"{gflops}  trials {r['trials']}")


@db_app.command("import")
def import_command(
    directory: Annotated[str, typer.Argument(
        help="A MetaSchedule database directory (database_workload.json, database_tuning_record.json).")],
    key: Annotated[str, typer.Option(
        envvar="TVM_TRACKER_KEY", help="RPC key to file the measurements under.")] = "local",
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Import TVM MetaSchedule tuning records (one transaction; importing twice adds nothing)."""
    from database import open_database
    from database.interop import import_metaschedule

    database = open_database(db)
    try:
        counts = import_metaschedule(database, directory, key)
    finally:
        database.close()
    if as_json:
        sys.stdout.write(json.dumps(counts) + "\n")
    else:
        typer.echo(f"{counts['records']} records of {counts['workloads']} workloads: "
                   f"{counts['measure_results']} measurements added, {counts['skipped']} already present")


@db_app.command("export")
def export_command(
    directory: Annotated[str, typer.Argument(
        help="Directory for database_workload.json and database_tuning_record.json (appended to).")],
    db: DbOption = None,
) -> None:
    """Export every measurement as a TVM MetaSchedule JSON database."""
    from database.interop import export_metaschedule

    with existing_database(db) as database:
        counts = export_metaschedule(database, directory)
    typer.echo(f"{counts['records']} records of {counts['workloads']} workloads written to {directory}")

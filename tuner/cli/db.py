"""``tune db``: migrate and inspect the tuning database."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

db_app = typer.Typer(help="Migrate and inspect the tuning database.", pretty_exceptions_show_locals=False,
                     no_args_is_help=True)

DbOption = Annotated[str | None, typer.Option("--db", envvar="TUNE_DB", help="SQLAlchemy database URL (default: sqlite:///tune.db).")]


@db_app.command("upgrade")
def upgrade_command(db: DbOption = None) -> None:
    """Bring the database to the current schema (the only command that migrates)."""
    from database import upgrade

    revision = upgrade(db)
    typer.echo(f"database schema at revision {revision}")


@db_app.command("stats")
def stats_command(
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Row counts per table."""
    from database import open_database

    database = open_database(db)
    try:
        stats = database.stats()
        url = database.url_display
    finally:
        database.close()
    if as_json:
        sys.stdout.write(json.dumps({"db": url, "rows": stats}) + "\n")
        return
    typer.echo(url)
    for table, count in stats.items():
        typer.echo(f"  {table:<22} {count:>10}")

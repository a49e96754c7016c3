"""The ``--db`` option and opening a tuning database that a command only reads."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Annotated

import typer

DbOption = Annotated[str | None, typer.Option("--db", envvar="TUNE_DB", help="SQLAlchemy database URL (default: sqlite:///tune.db).")]


@contextmanager
def existing_database(url: str | None, option: str = "--db"):
    """Open a tuning database that must already exist; yields a ``database.Database``, closed on exit.

    A missing SQLite file, or a database without the tuning tables (an empty
    file, another application's database), is an error: nothing is created in it.
    ``option`` is the command-line option that gave ``url``; errors name it.

    Raises
    ------
    ValueError
        The URL is malformed, the SQLite file does not exist, or the database
        cannot be opened as a tuning database (the message says why).
    """
    from database import DatabaseError, open_database
    from database.session import resolve_url, sqlite_file

    try:
        path = sqlite_file(resolve_url(url))
    except DatabaseError as exc:
        raise ValueError(f"{option}: {exc}") from None
    if path is not None and not os.path.exists(path):  # open_database refuses it too; this names the option
        raise ValueError(f"no database at {path}: give {option} the URL a tune run wrote to")
    try:
        db = open_database(url, create=False)
    except DatabaseError as exc:
        raise ValueError(f"{option}: {exc}") from None
    try:
        yield db
    finally:
        db.close()

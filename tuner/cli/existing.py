"""The ``--db`` option and opening a tuning database that a command only reads."""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
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
    from database.session import resolve_url

    try:
        parsed = resolve_url(url)
    except DatabaseError as exc:
        raise ValueError(f"{option}: {exc}") from None
    path = _sqlite_file(parsed)
    if path is not None and not os.path.exists(path):
        raise ValueError(f"no database at {path}: give {option} the URL a tune run wrote to")
    if path is not None and _sqlite_tables(path) == set():  # checked read-only: opening switches a file to WAL
        raise ValueError(f"{option}: {path} holds no tuning database (no tuning tables); a tune run creates one")
    try:
        db = open_database(url, create=False)
    except DatabaseError as exc:
        raise ValueError(f"{option}: {exc}") from None
    try:
        yield db
    finally:
        db.close()


def _sqlite_file(parsed) -> str | None:
    """The file a SQLite URL names (its ``file:`` URI form included), or None for memory and other backends."""
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    path = parsed.database
    if str(parsed.query.get("uri", "")).lower() == "true" and path.startswith("file:"):
        path = urllib.parse.urlparse(path).path
    return path or None


def _sqlite_tables(path: str) -> set[str] | None:
    """The tuning tables in the SQLite file ``path``, read without writing; None when it is not readable as SQLite."""
    from database.models import Base

    try:
        conn = sqlite3.connect(f"file:{urllib.parse.quote(path)}?mode=ro", uri=True)
        try:
            names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        return None  # open_database names the problem
    return names & set(Base.metadata.tables)

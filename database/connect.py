"""Opening a tuning database: its URL checked, an engine, its schema checked or created.

The one module that puts :mod:`database.session` (engines), :mod:`database.schema`
(revisions) and :mod:`database.store` (the records' queries) together.
"""

from __future__ import annotations

from .schema import check_sqlite_file, ensure_schema
from .session import create_engine_for, resolve_url
from .store import Database

__all__ = ["open_database"]


def open_database(url: str | None = None, create: bool = True) -> Database:
    """Open the tuning database, creating its schema when the database is empty and ``create`` is true.

    Parameters
    ----------
    url : str, optional
        A SQLAlchemy URL; when None, ``TUNE_DB`` from the environment, else
        ``sqlite:///tune.db`` in the current directory.
    create : bool
        Create the schema in a database that has none. False for commands that
        only read: they refuse a database no tuning run wrote to instead of
        adding tables to it.

    Returns
    -------
    Database
        The opened database; call :meth:`Database.close` when done.

    Raises
    ------
    DatabaseError
        When the database cannot be reached, is not a database, has no tuning
        schema (or is a missing SQLite file) and ``create`` is false, is a SQLite file with other tables and
        no tuning schema (another application's: it is left as it was), or its
        schema is older (run ``tune db upgrade``) or newer than this code.
    """
    parsed = resolve_url(url)
    check_sqlite_file(parsed, create)
    engine = create_engine_for(parsed)
    try:
        ensure_schema(engine, create=create)
    except BaseException:
        engine.dispose()
        raise
    return Database(engine)

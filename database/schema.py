"""Schema versions: Alembic, run from code, with a check on every open.

The migration scripts live in ``database/migrations``; the revision table is
``tune_alembic_version`` so that another Alembic-managed tool can share the
database. No ``alembic.ini`` is needed: the configuration is built here.

Policy: an empty database is created at the newest revision when it is first
opened; any other difference between the database's revision and the code's is
an error, and only :func:`upgrade` (``tune db upgrade``) migrates.
"""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Engine, inspect, text
from sqlalchemy.engine import URL, Connection

from .models import Base
from .session import (
    DatabaseError,
    create_engine_for,
    display_url,
    resolve_url,
    sqlite_file,
    transaction,
)

VERSION_TABLE = "tune_alembic_version"
MIGRATIONS_DIR = Path(__file__).with_name("migrations")
# Serialises schema creation among PostgreSQL clients (pg_advisory_xact_lock key).
_PG_SCHEMA_LOCK = 0x74756E65


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic configuration for this package, optionally bound to a connection."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["version_table"] = VERSION_TABLE
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest revision the code knows."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "the migrations directory has no revision"
    return head


def current_revision(conn: Connection) -> str | None:
    """The revision recorded in the database, or None when it has none."""
    context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def _has_tune_tables(conn: Connection) -> bool:
    names = set(inspect(conn).get_table_names())
    return bool(names & set(Base.metadata.tables))


def _lock_schema(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_SCHEMA_LOCK})


def _is_known(revision: str) -> bool:
    try:
        return ScriptDirectory.from_config(alembic_config()).get_revision(revision) is not None
    except CommandError:
        return False


def ensure_schema(engine: Engine, create: bool = True) -> str:
    """Check the schema revision of an engine's database; create it when empty and ``create`` is true.

    Returns
    -------
    str
        The database's revision (the code's head).

    Raises
    ------
    DatabaseError
        When the schema is older or newer than the code, tables exist without
        a recorded revision, or the database has no tuning tables and ``create``
        is false.
    """
    with transaction(engine, write=False) as conn:
        revision = current_revision(conn)
        if revision is None and not create and not _has_tune_tables(conn):
            raise DatabaseError(f"{display_url(engine.url)} holds no tuning database (no tuning tables); "
                                f"a tune run creates one")
    if revision is None:
        # Decide under the lock: another client may be creating the schema right now, and
        # outside it two reads can see its tables without its revision (READ COMMITTED).
        with transaction(engine) as conn:
            _lock_schema(conn)
            revision = current_revision(conn)
            if revision is None and not _has_tune_tables(conn):
                command.upgrade(alembic_config(conn), "head")
                revision = current_revision(conn)
    head = head_revision()
    url = display_url(engine.url)
    if revision == head:
        return revision
    if revision is None:
        raise DatabaseError(
            f"database {url} has tuning tables but no schema revision in "
            f"{VERSION_TABLE}: it was not made by this tool's migrations"
        )
    if _is_known(revision):
        raise DatabaseError(
            f"database schema is at revision {revision}, code expects {head}: "
            f"run `tune db upgrade --db {url}`"
        )
    raise DatabaseError(
        f"database schema is at revision {revision}, which this code does not know "
        f"(it expects {head}): the database was written by a newer version; "
        f"upgrade this tool instead of using it on {url}"
    )


def upgrade(url: str | None = None, revision: str = "head") -> str:
    """Migrate a database to ``revision`` (``tune db upgrade``).

    Parameters
    ----------
    url : str, optional
        The database URL, resolved as in :func:`database.open_database`.
    revision : str
        The target revision; the newest by default.

    Returns
    -------
    str
        The database's revision after the upgrade.

    Raises
    ------
    DatabaseError
        When the database cannot be reached, its revision is unknown to this code,
        or it is a SQLite file with other tables and no tuning schema (left as it was).
    """
    parsed = resolve_url(url)
    check_sqlite_file(parsed, create=True)
    engine = create_engine_for(parsed)
    try:
        with transaction(engine) as conn:
            _lock_schema(conn)
            before = current_revision(conn)
            if before is not None and not _is_known(before):
                raise DatabaseError(
                    f"database schema is at revision {before}, which this code does "
                    f"not know: upgrade this tool first"
                )
            try:
                command.upgrade(alembic_config(conn), revision)
            except CommandError as exc:
                raise DatabaseError(f"cannot upgrade {display_url(engine.url)}: {exc}") from None
            after = current_revision(conn)
    finally:
        engine.dispose()
    return after or ""


def sqlite_tables(path: str) -> set[str] | None:
    """The tables in the SQLite file ``path``, read without writing; None when it is not readable as SQLite."""
    try:
        conn = sqlite3.connect(f"file:{urllib.parse.quote(path)}?mode=ro", uri=True)
        try:
            return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        return None  # opening it names the problem


def check_sqlite_file(url: URL, create: bool) -> None:
    """Refuse a SQLite file that is not a tuning database before an engine touches it (or creates it).

    With ``create`` false a missing file is refused too: connecting would create it.

    Checked read-only: an engine switches the file to WAL on connect, which would
    change another application's file even when the schema check then refuses it.
    """
    path = sqlite_file(url)
    if path is None:
        return
    if os.path.isdir(path):
        raise DatabaseError(f"{path} is a directory, not a SQLite database file")
    if not os.path.exists(path):
        if create:
            return
        raise DatabaseError(f"no database at {path}: give the URL a tune run wrote to")
    tables = sqlite_tables(path)
    if tables is None or VERSION_TABLE in tables or (create and not tables):
        return
    if not tables:
        raise DatabaseError(f"{path} holds no tuning database (no tables); a tune run creates one")
    shown = ", ".join(sorted(tables)[:3]) + (f" and {len(tables) - 3} more" if len(tables) > 3 else "")
    raise DatabaseError(f"{path} is not a tuning database: it holds tables ({shown}) but no schema revision "
                        f"in {VERSION_TABLE}; give a new file or a database a tune run made")

"""Engine setup, the transaction helper and the error mapping.

SQLite (the default, a file in the working directory) runs in WAL mode with a busy
timeout, foreign keys on, and ``BEGIN IMMEDIATE`` for write transactions, so that
several processes can share one file. PostgreSQL is reached through psycopg 3
(``postgresql+psycopg://``) with one pre-pinging pool per process.

Every driver error that leaves this package is a :class:`DatabaseError` whose
message is one line and names the URL with its password hidden.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
import urllib.parse
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Connection, make_url

DEFAULT_URL = "sqlite:///tune.db"
URL_ENV = "TUNE_DB"
SQLITE_BUSY_TIMEOUT_S = 30.0
POSTGRES_CONNECT_TIMEOUT_S = 10
_EXAMPLE_URLS = "sqlite:///tune.db or postgresql+psycopg://USER@HOST:5432/DB"


class DatabaseError(RuntimeError):
    """A tuning-database failure, with a one-line message free of passwords."""


def resolve_url(url: str | None = None) -> URL:
    """Pick the database URL and normalise its driver.

    Parameters
    ----------
    url : str, optional
        An explicit URL. When None, the ``TUNE_DB`` environment variable is used,
        and when that is unset or empty, ``sqlite:///tune.db`` (a file in the
        current directory).

    Returns
    -------
    sqlalchemy.engine.URL
        The parsed URL; a bare ``postgresql://`` (or ``postgres://``) becomes
        ``postgresql+psycopg://``.

    Raises
    ------
    DatabaseError
        When the URL cannot be parsed or names an unknown backend.
    """
    text = url or os.environ.get(URL_ENV) or DEFAULT_URL
    try:
        parsed = make_url(text)
    except sa_exc.ArgumentError:
        raise DatabaseError(
            f"malformed database URL (expected e.g. {_EXAMPLE_URLS})"
        ) from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


# Query parameters whose values are credentials: libpq's ``password`` and ``sslpassword``
# (the key file's passphrase), and any other driver's parameter whose name says it holds one.
# Paths to credentials (``passfile``, ``sslkey``) are shown: they are not secrets themselves.
_SECRET_WORDS = ("password", "passwd", "pwd", "secret", "token")
_MASK = "***"


def is_secret_parameter(name: str) -> bool:
    """Whether a URL query parameter named ``name`` carries a credential (its value is never shown)."""
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_WORDS)


def secret_values(url: URL) -> list[str]:
    """The credentials a URL carries: its password and the values of its secret query parameters."""
    values = [str(url.password)] if url.password else []
    for name, value in url.query.items():
        if is_secret_parameter(name):
            values.extend(v for v in ((value,) if isinstance(value, str) else value) if v)
    return values


def display_url(url: URL | str) -> str:
    """The URL as text with its password and secret query parameters replaced by ``***``."""
    if isinstance(url, str):
        try:
            url = make_url(url)
        except sa_exc.ArgumentError:
            return "<malformed URL>"
    masked = {name: _MASK for name in url.query if is_secret_parameter(name)}
    text = url.update_query_dict(masked).render_as_string(hide_password=True)
    quoted = urllib.parse.quote_plus(_MASK)  # the query renders "***" quoted
    return text.replace(f"={quoted}", f"={_MASK}")


def hide_secrets(text: str, url: URL) -> str:
    """``text`` with every credential of ``url`` (see :func:`secret_values`) replaced by ``***``."""
    for value in sorted(secret_values(url), key=len, reverse=True):
        text = text.replace(value, _MASK)
    return text


def create_engine_for(url: URL) -> Engine:
    """Create an engine with the per-backend settings described in the module docstring.

    Parameters
    ----------
    url : sqlalchemy.engine.URL
        A URL from :func:`resolve_url`.

    Raises
    ------
    DatabaseError
        When the backend is unsupported or its driver is not installed.
    """
    backend = url.get_backend_name()
    try:
        if backend == "sqlite":
            with warnings.catch_warnings():  # SQLAlchemy would only warn that it ignores them
                warnings.simplefilter("error", sa_exc.SAWarning)
                try:
                    engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})
                except sa_exc.SAWarning:
                    raise DatabaseError(
                        f"SQLite URL {display_url(url)} has query arguments that need uri=true and a file: path, "
                        "e.g. sqlite:///file:tune.db?mode=ro&uri=true"
                    ) from None
            _configure_sqlite(engine)
        elif backend == "postgresql":
            connect_args = {}
            if "connect_timeout" not in url.query:
                connect_args["connect_timeout"] = POSTGRES_CONNECT_TIMEOUT_S
            engine = create_engine(url, pool_pre_ping=True, connect_args=connect_args)
        else:
            raise DatabaseError(
                f"unsupported database backend {backend!r} in {display_url(url)} "
                f"(use {_EXAMPLE_URLS})"
            )
    except (sa_exc.ArgumentError, ImportError) as exc:
        raise DatabaseError(f"cannot use database URL {display_url(url)}: {exc}") from None
    return engine


def _configure_sqlite(engine: Engine) -> None:
    """WAL, busy timeout, foreign keys; SQLAlchemy (not sqlite3) emits BEGIN."""

    def _retry_locked(statement) -> None:
        # Switching a brand-new file to WAL needs its exclusive lock; SQLite can answer
        # "database is locked" at once (no busy handler) while another connection makes
        # the same switch, so retry within the busy timeout.
        deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_S
        while True:
            try:
                statement()
                return
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, connection_record) -> None:
        # Take transaction control away from sqlite3 (SQLAlchemy's pysqlite recipe).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
            cursor.execute("PRAGMA foreign_keys = ON")
            _retry_locked(lambda: cursor.execute("PRAGMA journal_mode = WAL"))
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # A write transaction takes the write lock up front, so it waits on the busy
        # timeout instead of failing later when a reader tries to upgrade its lock.
        read_only = conn.get_execution_options().get("tune_read_only", False)
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


@contextmanager
def transaction(engine: Engine, *, write: bool = True) -> Iterator[Connection]:
    """A connection inside one transaction: committed on success, rolled back on error.

    Parameters
    ----------
    engine : sqlalchemy.Engine
        An engine from :func:`create_engine_for`.
    write : bool
        False for a read-only transaction (a deferred ``BEGIN`` on SQLite, so
        readers never wait on the write lock).

    Raises
    ------
    DatabaseError
        For every driver error, with a one-line message naming the URL without
        its password.
    """
    try:
        with engine.connect() as conn:
            if not write:
                conn.execution_options(tune_read_only=True)
            with conn.begin():
                yield conn
    except sa_exc.SQLAlchemyError as exc:
        raise translate_error(exc, engine.url) from None


def translate_error(exc: BaseException, url: URL) -> DatabaseError:
    """Map a SQLAlchemy or driver exception to a one-line :class:`DatabaseError`."""
    orig = getattr(exc, "orig", None)
    reason = str(orig if orig is not None else exc)
    reason = re.sub(r"\s+", " ", reason).strip()
    reason = hide_secrets(reason, url)
    hint = _hint(reason)
    message = f"database {display_url(url)}: {reason}"
    return DatabaseError(f"{message} ({hint})" if hint else message)


_HINTS = (
    ("unable to open database file", "check that the directory exists and is writable"),
    ("readonly database", "the database file or its directory is read-only"),
    ("file is not a database", "the file exists but is not a SQLite database"),
)


def _hint(reason: str) -> str:
    lowered = reason.lower()
    return next((hint for needle, hint in _HINTS if needle in lowered), "")


def sqlite_file(url: URL) -> str | None:
    """The file a SQLite URL names (its ``file:`` URI form included), or None for memory and other backends."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    path = url.database
    if str(url.query.get("uri", "")).lower() == "true" and path.startswith("file:"):
        path = urllib.parse.urlparse(path).path
    return path or None



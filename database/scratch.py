"""A private, empty PostgreSQL schema for a test or a benchmark, dropped afterwards."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url


@contextlib.contextmanager
def scratch_postgres_schema(url: str, prefix: str = "tune_scratch") -> Iterator[str]:
    """Create schema ``<prefix>_<random>`` in the PostgreSQL database of ``url``; yield a URL that uses it.

    The yielded URL (driver ``postgresql+psycopg``, password kept so that it can
    connect) sets ``search_path`` to the new schema, so every table the tuner
    creates lands there; the schema and everything in it are dropped on exit.

    Raises
    ------
    sqlalchemy.exc.OperationalError
        The server cannot be reached.
    """
    base = make_url(url)
    if base.drivername in ("postgresql", "postgres"):
        base = base.set(drivername="postgresql+psycopg")
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield base.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()

"""Bulk loading of raw rows, for synthetic databases (benchmarks of the queries).

Rows go straight into the tables, ids included, bypassing the records and
their checks; :mod:`database.store` is the way in for real measurements.
"""

from __future__ import annotations

from sqlalchemy import text

from .models import Base
from .session import create_engine_for, resolve_url

__all__ = ["bulk_insert"]

#: Rows per INSERT statement.
CHUNK = 50_000


def bulk_insert(url: str, rows: dict[str, list[dict]]) -> None:
    """Insert ``rows`` (table name to column dicts, ids included) in one transaction, then ANALYZE.

    Tables are filled in the order given, so parents (``target``, ``workload``)
    come before the rows that reference them. On PostgreSQL each table's id
    sequence is moved past its largest id, so later inserts get fresh ids.

    Raises
    ------
    KeyError
        A table name that is not in the schema.
    DatabaseError
        When the URL is malformed or names an unsupported backend.
    """
    tables = [(Base.metadata.tables[name], table_rows) for name, table_rows in rows.items()]
    engine = create_engine_for(resolve_url(url))
    try:
        with engine.begin() as conn:
            for table, table_rows in tables:
                for start in range(0, len(table_rows), CHUNK):
                    conn.execute(table.insert(), table_rows[start:start + CHUNK])
            if conn.dialect.name == "postgresql":
                for table, _ in tables:
                    conn.execute(text(f"SELECT setval(pg_get_serial_sequence('{table.name}', 'id'), "
                                      f"(SELECT MAX(id) FROM {table.name}))"))
            conn.execute(text("ANALYZE"))
    finally:
        engine.dispose()

"""Alembic environment for the tuning database.

Normally run from :mod:`database.schema`, which passes an open connection (inside
a transaction it commits) in ``config.attributes["connection"]``. Run through the
``alembic`` command line, it connects to ``sqlalchemy.url`` or, when that is unset,
to ``TUNE_DB`` / ``sqlite:///tune.db``.
"""

from __future__ import annotations

from alembic import context

from database.models import Base
from database.schema import VERSION_TABLE
from database.session import create_engine_for, resolve_url, transaction

config = context.config
target_metadata = Base.metadata
version_table = config.attributes.get("version_table", VERSION_TABLE)


def run_migrations(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        version_table=version_table,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def run_offline() -> None:
    context.configure(
        url=resolve_url(config.get_main_option("sqlalchemy.url")),
        target_metadata=target_metadata,
        version_table=version_table,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run_migrations(connection)
        return
    engine = create_engine_for(resolve_url(config.get_main_option("sqlalchemy.url")))
    try:
        with transaction(engine) as conn:
            run_migrations(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()

"""Schema creation, revision checks and upgrades, on every backend."""

from __future__ import annotations

import shutil
import textwrap

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from database import DatabaseError, open_database, schema, upgrade
from database.models import Base
from database.session import display_url, resolve_url

NOTE_REVISION = '''
"""Add a note to targets (a stand-in for a future migration)."""

import sqlalchemy as sa
from alembic import op

revision = "NEXT"
down_revision = "HEAD"
branch_labels = None
depends_on = None


def upgrade():
    op.add_column("target", sa.Column("note", sa.Text(), nullable=True))


def downgrade():
    with op.batch_alter_table("target") as batch:
        batch.drop_column("note")
'''


def _pretend_newer_code(tmp_path, monkeypatch) -> str:
    """Make the code's migrations one revision ahead of the package's; returns the new one."""
    head, scripts = schema.head_revision(), tmp_path / "migrations"
    newer = f"{int(head) + 1:04d}"
    shutil.copytree(schema.MIGRATIONS_DIR, scripts, ignore=shutil.ignore_patterns("__pycache__"))
    source = textwrap.dedent(NOTE_REVISION).replace("NEXT", newer).replace("HEAD", head)
    (scripts / "versions" / f"{newer}_target_note.py").write_text(source)
    monkeypatch.setattr(schema, "MIGRATIONS_DIR", scripts)
    return newer


def _execute(url: str, sql: str) -> None:
    engine = create_engine(resolve_url(url))
    with engine.begin() as conn:
        conn.execute(text(sql))
    engine.dispose()


def _engine(url):
    return create_engine(resolve_url(url))


def test_new_sqlite_file_is_created_in_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TUNE_DB", raising=False)
    with open_database() as db:
        assert db.url_display == "sqlite:///tune.db"
        assert set(db.stats().values()) == {0}
    assert (tmp_path / "tune.db").exists()


def test_tune_db_environment_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNE_DB", f"sqlite:///{tmp_path / 'env.db'}")
    with open_database() as db:
        assert db.url_display.endswith("env.db")
    assert (tmp_path / "env.db").exists()
    with open_database(f"sqlite:///{tmp_path / 'explicit.db'}") as db:
        assert db.url_display.endswith("explicit.db")


def test_empty_database_is_created_at_head(db_url):
    with open_database(db_url) as db:
        assert db.stats()["measure_result"] == 0
    engine = _engine(db_url)
    with engine.connect() as conn:
        assert schema.current_revision(conn) == schema.head_revision()
        tables = set(inspect(conn).get_table_names())
    engine.dispose()
    assert set(Base.metadata.tables) | {schema.VERSION_TABLE} <= tables
    with open_database(db_url):  # a second open finds the schema current
        pass


def test_models_match_migrations(db_url):
    open_database(db_url).close()
    engine = _engine(db_url)
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table": schema.VERSION_TABLE})
        assert compare_metadata(context, Base.metadata) == []
    engine.dispose()


def test_old_schema_names_the_upgrade_command(db_url, tmp_path, monkeypatch):
    open_database(db_url).close()  # made by this release
    head = schema.head_revision()
    newer = _pretend_newer_code(tmp_path, monkeypatch)
    with pytest.raises(DatabaseError) as info:
        open_database(db_url)
    shown = display_url(resolve_url(db_url))
    assert str(info.value) == (
        f"database schema is at revision {head}, code expects {newer}: "
        f"run `tune db upgrade --db {shown}`"
    )
    assert upgrade(db_url) == newer
    with open_database(db_url) as db:
        assert db.stats()["target"] == 0
    engine = _engine(db_url)
    with engine.connect() as conn:
        assert "note" in {c["name"] for c in inspect(conn).get_columns("target")}
    engine.dispose()


def test_newer_schema_is_refused(db_url):
    open_database(db_url).close()
    _execute(db_url, f"UPDATE {schema.VERSION_TABLE} SET version_num = '9999'")
    with pytest.raises(DatabaseError, match=r"revision 9999, which this code does not know.*newer"):
        open_database(db_url)
    with pytest.raises(DatabaseError, match="revision 9999"):
        upgrade(db_url)


def test_tables_without_revision_are_refused(db_url):
    open_database(db_url).close()
    _execute(db_url, f"DELETE FROM {schema.VERSION_TABLE}")
    with pytest.raises(DatabaseError, match="no schema revision"):
        open_database(db_url)


def test_upgrade_creates_a_new_database(db_url):
    assert upgrade(db_url) == schema.head_revision()
    assert upgrade(db_url) == schema.head_revision()
    open_database(db_url).close()


def test_upgrade_to_unknown_revision_is_an_error(tmp_path):
    with pytest.raises(DatabaseError, match="cannot upgrade"):
        upgrade(f"sqlite:///{tmp_path / 'tune.db'}", revision="no-such-revision")


def test_clients_opening_a_new_database_at_once_all_get_the_schema(db_url):
    """Many tuners starting together on an empty database: one creates the schema, none is refused."""
    from concurrent.futures import ThreadPoolExecutor

    def open_and_close(_):
        database = open_database(db_url)
        database.close()
        return True

    with ThreadPoolExecutor(max_workers=6) as pool:
        assert all(pool.map(open_and_close, range(12)))
    with open_database(db_url) as database:
        assert database.stats()["session"] == 0

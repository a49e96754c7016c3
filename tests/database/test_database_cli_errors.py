"""Bad input to `tune db`: one line on stderr, a non-zero exit, no traceback, nothing half-written."""

from __future__ import annotations

import sys

import pytest
from sqlalchemy import create_engine, text

from database import open_database, upgrade
from database.schema import VERSION_TABLE
from tuner.cli import app
from tuner.cli.errors import main_guard


def tune_db(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    """Run `tune db ARGS` in this process through the CLI's error guard; (exit code, stderr)."""
    monkeypatch.setattr(sys, "argv", ["tune", "db", *args])
    with pytest.raises(SystemExit) as done:
        main_guard(app)
    return done.value.code, capsys.readouterr().err


def assert_one_line(code: int, err: str, *needles: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("command", ["stats", "upgrade"])
def test_malformed_url(monkeypatch, capsys, command):
    assert_one_line(*tune_db(monkeypatch, capsys, command, "--db", "not a url ::SECRETPW"), "malformed database URL")
    assert "SECRETPW" not in capsys.readouterr().err


@pytest.mark.parametrize("command", ["stats", "upgrade"])
def test_unreachable_server(monkeypatch, capsys, command):
    url = "postgresql+psycopg://u:SECRETPW@127.0.0.1:1/x?connect_timeout=2"
    code, err = tune_db(monkeypatch, capsys, command, "--db", url)
    assert_one_line(code, err, "postgresql+psycopg://u:***@127.0.0.1:1/x")
    assert "SECRETPW" not in err


def test_not_a_database(monkeypatch, capsys, tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("these are notes, not a database\n" * 20)
    for command in ("stats", "upgrade"):
        assert_one_line(*tune_db(monkeypatch, capsys, command, "--db", f"sqlite:///{path}"), "not a database")
    assert path.read_text() == "these are notes, not a database\n" * 20


def _foreign_sqlite_file(path, table: str):
    """A SQLite file at ``path`` holding another application's ``table`` and no tuning schema."""
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(text(f"CREATE TABLE {table} (body TEXT)"))
    engine.dispose()
    return path


@pytest.mark.parametrize("command", [["stats"], ["best", "--model", "qwen3-0.6b"], ["export", "out"]])
def test_reading_commands_add_nothing_to_another_database(monkeypatch, capsys, tmp_path, command):
    other, empty, same_name = tmp_path / "other.db", tmp_path / "empty.db", tmp_path / "same_name.db"
    _foreign_sqlite_file(other, "notes")
    _foreign_sqlite_file(same_name, "session")  # "session" is also a tuning table's name
    empty.touch()
    for path in (other, empty, same_name):
        before = path.read_bytes()
        args = [a if a != "out" else str(tmp_path / "out") for a in command]
        message = "holds no tuning database" if path == empty else "is not a tuning database"
        assert_one_line(*tune_db(monkeypatch, capsys, *args, "--db", f"sqlite:///{path}"), message)
        assert path.read_bytes() == before
    assert not (tmp_path / "out").exists()
    assert_one_line(*tune_db(monkeypatch, capsys, "stats", "--db", f"sqlite:///{tmp_path / 'missing.db'}"),
                    "no database at")
    assert not (tmp_path / "missing.db").exists()


def test_writing_commands_refuse_another_applications_sqlite_file(monkeypatch, capsys, tmp_path):
    """tune db upgrade and import never add tuning tables to a SQLite file that holds other tables."""
    path = _foreign_sqlite_file(tmp_path / "app.db", "session")
    before = path.read_bytes()
    (tmp_path / "records").mkdir()
    for args in (["upgrade"], ["import", str(tmp_path / "records")]):
        assert_one_line(*tune_db(monkeypatch, capsys, *args, "--db", f"sqlite:///{path}"), "is not a tuning database")
        assert path.read_bytes() == before


def test_read_only_database_is_not_half_upgraded(monkeypatch, capsys, tmp_path):
    path = tmp_path / "tune.db"
    upgrade(f"sqlite:///{path}", "0001")
    before = path.read_bytes()
    read_only = f"sqlite:///file:{path}?mode=ro&uri=true"
    assert_one_line(*tune_db(monkeypatch, capsys, "upgrade", "--db", read_only), "read-only")
    assert_one_line(*tune_db(monkeypatch, capsys, "stats", "--db", read_only), "tune db upgrade")
    engine = create_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        assert conn.scalar(text(f"SELECT version_num FROM {VERSION_TABLE}")) == "0001"
        assert "candidate_claim" not in {r[0] for r in conn.execute(text("SELECT name FROM sqlite_master"))}
    engine.dispose()
    assert path.read_bytes() == before
    code, _ = tune_db(monkeypatch, capsys, "upgrade", "--db", f"sqlite:///{path}")
    assert code == 0
    open_database(f"sqlite:///{path}").close()


def test_best_without_a_selection(monkeypatch, capsys, tmp_path):
    assert_one_line(*tune_db(monkeypatch, capsys, "best", "--db", f"sqlite:///{tmp_path / 't.db'}"), "--model")


def test_export_into_a_file_is_one_line(monkeypatch, capsys, tmp_path):
    a_file = tmp_path / "not-a-directory"
    a_file.write_text("x")
    db = f"sqlite:///{tmp_path / 't.db'}"
    open_database(db).close()
    assert_one_line(*tune_db(monkeypatch, capsys, "export", str(a_file), "--db", db),
                    "cannot write a MetaSchedule database in")
    assert a_file.read_text() == "x"


@pytest.mark.parametrize("command", ["stats", "upgrade"])
def test_unreachable_server_hides_a_query_string_password(monkeypatch, capsys, command):
    url = "postgresql+psycopg://u@127.0.0.1:1/x?password=SECRETPW&sslpassword=KEYPW&connect_timeout=2"
    code, err = tune_db(monkeypatch, capsys, command, "--db", url)
    assert_one_line(code, err, "password=***", "sslpassword=***")
    assert "SECRETPW" not in err and "KEYPW" not in err


@pytest.mark.parametrize("command", ["stats", "upgrade"])
def test_errors_name_the_option(monkeypatch, capsys, tmp_path, command):
    path = tmp_path / "notes.db"
    path.write_text("these are notes, not a database\n" * 20)
    code, err = tune_db(monkeypatch, capsys, command, "--db", f"sqlite:///{path}")
    assert_one_line(code, err, "not a database")
    assert err.startswith("error: --db: "), err

"""Driver failures become one-line DatabaseErrors that never show a password."""

from __future__ import annotations

import os
import warnings

import pytest

from database import DatabaseError, TargetRecord, open_database
from database.session import display_url, resolve_url


def _error(url: str) -> str:
    with pytest.raises(DatabaseError) as info:
        open_database(url).close()
    message = str(info.value)
    assert "\n" not in message
    return message


def test_password_never_in_error_text():
    message = _error("postgresql+psycopg://u:SECRETPW@127.0.0.1:1/x")
    assert "SECRETPW" not in message
    assert "postgresql+psycopg://u:***@127.0.0.1:1/x" in message
    assert "SECRETPW" not in _error("mysql://u:SECRETPW@db.example/x")
    assert "SECRETPW" not in _error("postgresql+nosuchdriver://u:SECRETPW@127.0.0.1:1/x")


def test_display_url_hides_password():
    assert display_url("postgresql://u:SECRETPW@h/db") == "postgresql://u:***@h/db"
    assert display_url("::nonsense") == "<malformed URL>"


def test_bare_postgresql_url_uses_psycopg():
    assert resolve_url("postgresql://u@h/db").drivername == "postgresql+psycopg"
    assert resolve_url("postgres://u@h/db").drivername == "postgresql+psycopg"
    assert resolve_url("postgresql+psycopg://u@h/db").drivername == "postgresql+psycopg"


def test_malformed_url():
    message = _error("not a url ::SECRETPW")
    assert message.startswith("malformed database URL")
    assert "SECRETPW" not in message


def test_not_a_database_file(tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("these are notes, not a database\n" * 20)
    assert "not a database" in _error(f"sqlite:///{path}")


def test_missing_directory(tmp_path):
    message = _error(f"sqlite:///{tmp_path / 'no' / 'such' / 'dir' / 'tune.db'}")
    assert "unable to open database file" in message


def test_opening_only_to_read_creates_no_file(tmp_path):
    """open_database(create=False) refuses a missing SQLite file instead of connecting, which would create it."""
    path = tmp_path / "missing.db"
    with pytest.raises(DatabaseError, match=f"no database at {path}"):
        open_database(f"sqlite:///{path}", create=False)
    assert not path.exists()


def test_read_only_database(tmp_path):
    path = tmp_path / "tune.db"
    open_database(f"sqlite:///{path}").close()
    with open_database(f"sqlite:///file:{path}?mode=ro&uri=true") as db:
        assert db.stats()["target"] == 0  # reading works
        with pytest.raises(DatabaseError, match="read-only"):
            db.add_target(TargetRecord("{}", "local"))


def test_sqlite_uri_arguments_without_uri_true(tmp_path):
    """mode=ro on a plain path would be ignored (SQLAlchemy only warns): it is an error naming the fix."""
    path = tmp_path / "tune.db"
    open_database(f"sqlite:///{path}").close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no warning printed beside it
        message = _error(f"sqlite:///{path}?mode=ro")
    assert "need uri=true" in message and "sqlite:///file:" in message


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_directory(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        assert "unable to open database file" in _error(f"sqlite:///{locked / 'tune.db'}")
    finally:
        locked.chmod(0o700)


def test_display_url_hides_credentials_in_the_query_string():
    shown = display_url("postgresql+psycopg://u@h/db?password=SECRETPW&sslpassword=KEYPW&application_name=tune")
    assert "SECRETPW" not in shown and "KEYPW" not in shown
    assert "password=***" in shown and "sslpassword=***" in shown and "application_name=tune" in shown
    assert display_url("postgresql+psycopg://u@h/db?passfile=/home/u/.pgpass").endswith("passfile=%2Fhome%2Fu%2F.pgpass")


def test_query_string_password_never_in_error_text():
    message = _error("postgresql+psycopg://u@127.0.0.1:1/x?password=SECRETPW&connect_timeout=2")
    assert "SECRETPW" not in message
    assert "password=***" in message

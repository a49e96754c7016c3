"""The `tune` command line's help and version: -h, --version, flags shown without a type."""

from __future__ import annotations

from typer.testing import CliRunner

from tuner.cli import app
from tuner.cli.help import version

runner = CliRunner()


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"tune {version()}"


def test_dash_h_is_help():
    for args in ([], ["run"], ["db", "stats"], ["model", "eval"]):
        short, long = runner.invoke(app, [*args, "-h"]), runner.invoke(app, [*args, "--help"])
        assert short.exit_code == 0, short.output
        assert short.output == long.output


def test_flags_show_no_type():
    for args in (["run"], ["db", "stats"]):
        shown = runner.invoke(app, [*args, "--help"], env={"COLUMNS": "200"}).output
        assert "<bool>" not in shown, shown
        assert "--json" in shown
    assert "<int>" in runner.invoke(app, ["run", "--help"], env={"COLUMNS": "200"}).output

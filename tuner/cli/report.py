"""``tune report``: the notebooks' figures as PNG files and an HTML summary."""

from __future__ import annotations

from typing import Annotated

import typer

from .errors import fail


def report_command(
    out: Annotated[str, typer.Option(
        "--out", help="Directory for index.html and the PNG figures (created if needed).")],
    db: Annotated[str | None, typer.Option(
        "--db", envvar="TUNE_DB", help="SQLAlchemy database URL (default: sqlite:///tune.db).")] = None,
    roofline: Annotated[bool, typer.Option(
        "--roofline/--no-roofline", help="Measure this machine's peak FLOP/s and bandwidth for the roofline "
        "section.")] = True,
) -> None:
    """Write tuning curves, cost-model, database and roofline figures and tables of a tuning database."""
    from tuner.analysis.report import write_report
    from tuner.analysis.tables import AnalysisError

    try:
        report = write_report(db, out, measure_peaks=roofline)
    except AnalysisError as err:
        fail(str(err))
    except OSError as err:
        fail(f"cannot write the report to {out}: {err.strerror or err}")
    typer.echo(f"report: {report.index} ({len(report.figures)} figures)")
    for line in report.missing:
        typer.echo(f"  missing {line}")

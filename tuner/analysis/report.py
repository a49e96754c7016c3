"""The report behind ``tune report``: every notebook's tables and figures as PNG files and one ``index.html``.

Sections follow the notebooks (tuning curves, cost model, database overview,
roofline). A part the database cannot support (no cost model yet, one workload,
no repeats) is listed in the page as missing, with the reason, instead of failing
the report; a database with no measurement at all fails it (:class:`AnalysisError`).
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from . import plots
from . import tables as an

_STYLE = ("body{font-family:sans-serif;max-width:1000px;margin:2em auto}"
          "table{border-collapse:collapse;font-size:small}"
          "td,th{border:1px solid #ccc;padding:2px 6px}.missing{color:#a33}")


@dataclass
class Report:
    """What a report wrote: ``index`` (the HTML page), ``figures`` (PNG paths), ``missing`` (one line per part not
    drawn)."""

    index: Path
    figures: list[Path] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def _sections(data: an.TuningData, measure_peaks: bool) -> list[tuple[str, list[tuple[str, Callable]]]]:
    """(section title, [(part name, thunk returning a DataFrame or a Figure)])."""
    from . import cost_model as acm
    from . import roofline as arl

    fit_cache: dict = {}

    def fit():
        if "fit" not in fit_cache:
            fit_cache["fit"] = acm.newest_model_fit(data)
        return fit_cache["fit"]

    def peaks():
        from measure.roofline import measure_roofline

        if not measure_peaks:
            raise an.AnalysisError("roofline peaks not measured (--no-roofline)")
        return measure_roofline()

    return [
        ("Tuning curves", [
            ("tuning_curves", lambda: plots.tuning_curves(an.tuning_curves(data))),
            ("session_curves", lambda: plots.session_curves(an.session_curves(data))),
            ("workloads", lambda: an.workloads_table(data)),
        ]),
        ("Cost model", [
            ("model_versions", lambda: plots.model_versions(acm.model_versions(data))),
            ("predicted_vs_measured", lambda: plots.predicted_vs_measured(fit().predictions)),
            ("prediction_error", lambda: pd.DataFrame([acm.prediction_error(fit())])),
            ("ranking", lambda: plots.ranking_metrics(acm.ranking_per_workload(fit()))),
            ("feature_importance", lambda: plots.feature_importance(acm.feature_importance(fit()))),
        ]),
        ("Database overview", [
            ("overview", lambda: an.overview(data)),
            ("models", lambda: an.models_table(data)),
            ("targets", lambda: an.targets_table(data)),
            ("measurements_over_time", lambda: plots.measurements_over_time(an.measurements_over_time(data))),
            ("failures", lambda: plots.failures(an.failures_by_status(data))),
            ("failure_examples", lambda: an.failures_by_status(data)),
            ("repeat_noise", lambda: plots.repeat_noise(an.repeat_noise(data))),
        ]),
        ("Roofline", [
            ("peaks", lambda: arl.peaks_table(peaks())),
            ("roofline", lambda: plots.roofline(arl.roofline_points(data, peaks()), peaks())),
            ("roofline_points", lambda: arl.roofline_points(data, peaks())),
        ]),
    ]


def write_report(db_url: str | None, out_dir: str | Path, measure_peaks: bool = True) -> Report:
    """Write the report of a database into ``out_dir`` (created if needed).

    Parameters
    ----------
    db_url : str, optional
        The database URL (default as :func:`tuner.analysis.tables.resolve_db_url`).
    out_dir : str or Path
        Where ``index.html`` and the ``*.png`` figures go.
    measure_peaks : bool
        Measure this machine's roofline peaks (about 5 s to a minute, with compiling).

    Raises
    ------
    AnalysisError
        When the database cannot be read or holds no measurement.
    OSError
        When ``out_dir`` cannot be written.
    """
    data = an.load(db_url)
    an.require_measurements(data, ok=False)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report = Report(index=out / "index.html")
    body = [f"<h1>Tuning report</h1><p>Database: <code>{html.escape(data.url)}</code></p>"]
    for title, parts in _sections(data, measure_peaks):
        body.append(f"<h2>{html.escape(title)}</h2>")
        for name, make in parts:
            try:
                item = make()
            except an.AnalysisError as err:
                report.missing.append(f"{name}: {err}")
                body.append(f'<p class="missing">missing ({html.escape(name)}): {html.escape(str(err))}</p>')
                continue
            if isinstance(item, Figure):
                path = out / f"{name}.png"
                item.savefig(path, dpi=110)
                report.figures.append(path)
                body.append(f'<p><img src="{path.name}" alt="{html.escape(name)}"></p>')
            else:
                body.append(item.to_html(index=False, float_format=lambda v: f"{v:.4g}", border=0))
    report.index.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>Tuning report</title>"
                            f"<style>{_STYLE}</style></head><body>{''.join(body)}</body></html>\n")
    return report

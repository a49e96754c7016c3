"""Write the analysis notebooks (outputs stripped) from the cell sources below.

Run ``python notebooks/make_notebooks.py`` after editing this file; the
``.ipynb`` files are generated, never edited by hand. Every notebook reads the
database named by its ``db_url`` parameter (papermill's ``parameters`` tag),
else ``TUNE_DB``, else ``sqlite:///tune.db``, and only calls ``tuner.analysis``
and plots; a part the database cannot support prints ``missing: <reason>``.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).parent

PARAMETERS = """\
# Parameters (papermill): a SQLAlchemy URL, or None for $TUNE_DB, else sqlite:///tune.db here.
db_url = None"""

SETUP = """\
%matplotlib inline
from IPython.display import display

from tuner.analysis import plots
from tuner.analysis import tables as an

data = None
with an.report_missing():
    data = an.load(db_url)
    print(f"database: {data.url}")"""


def part(code: str) -> str:
    """A cell body that prints what is missing instead of failing."""
    body = "\n".join("    " + line if line else line for line in code.strip().splitlines())
    return f"with an.report_missing():\n{body}"


NOTEBOOKS = {
    "01_tuning_curves": (
        "# Tuning curves\n\nBest latency versus trials per workload (MetaSchedule's curve dashed beside ours "
        "where the database holds imported MetaSchedule records) and per session.",
        [
            part("""
curves = an.tuning_curves(data)
if not an.has_metaschedule(data):
    print("no MetaSchedule records in this database (import them with `tune db import`): our curves only")
display(plots.tuning_curves(curves))"""),
            part("display(plots.session_curves(an.session_curves(data)))"),
            part("display(an.workloads_table(data))"),
        ],
    ),
    "02_cost_model": (
        "# Cost model\n\nThe newest stored cost model against every successful measurement of its target: "
        "its predictions of each workload by a model of the same parameters trained without that workload "
        "(held out, as a later compile meets a new shape; the figure and the error summary), its "
        "in-sample ranking per workload, its most important features, and how versions changed.",
        [
            "from tuner.analysis import cost_model as acm",
            part("""
versions = acm.model_versions(data)
display(versions)
display(plots.model_versions(versions))"""),
            part("""
fit = None
fit = acm.newest_model_fit(data)
print(f"cost model version {fit.model_id} ({fit.key}):", acm.prediction_error(fit))
display(plots.predicted_vs_measured(fit.predictions))"""),
            part("""
if fit is None:
    raise an.AnalysisError("no cost model fit (see above)")
ranking = acm.ranking_per_workload(fit)
display(ranking)
display(plots.ranking_metrics(ranking))"""),
            part("""
if fit is None:
    raise an.AnalysisError("no cost model fit (see above)")
importance = acm.feature_importance(fit)
display(importance)
display(plots.feature_importance(importance))"""),
        ],
    ),
    "03_database_overview": (
        "# Database overview\n\nModels, workloads, targets, device keys, measurements over time, failures by "
        "status and measurement noise (coefficient of variation of the repeats).",
        [
            part("display(an.overview(data))"),
            part("display(an.models_table(data))\ndisplay(an.targets_table(data))"),
            part("display(plots.measurements_over_time(an.measurements_over_time(data)))"),
            part("""
failures = an.failures_by_status(data)
display(failures)
display(plots.failures(failures))"""),
            part("""
noise = an.repeat_noise(data)
print(noise.cv.describe())
display(plots.repeat_noise(noise))"""),
        ],
    ),
    "04_roofline": (
        "# Roofline\n\nTuned kernels' achieved FLOP/s against arithmetic intensity under this machine's "
        "measured peak FLOP/s (FMA microbenchmark) and memory bandwidth (STREAM copy); see "
        "`measure/roofline.py` for the method.",
        [
            "from measure.roofline import measure_roofline\nfrom tuner.analysis import roofline as arl",
            part("""
an.require_measurements(data)
peaks = measure_roofline()
display(arl.peaks_table(peaks))
points = arl.roofline_points(data, peaks)
display(points)
display(plots.roofline(points, peaks))"""),
        ],
    ),
}


def build(title: str, cells: list[str]) -> nbformat.NotebookNode:
    """A notebook: title, the tagged parameters cell, the setup cell, then ``cells``."""
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    params = new_code_cell(PARAMETERS)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [new_markdown_cell(title), params, new_code_cell(SETUP)] + [new_code_cell(c) for c in cells]
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i}"  # stable ids: regenerating gives the same file
    return nb


def main() -> None:
    """Write every notebook next to this file."""
    for name, (title, cells) in NOTEBOOKS.items():
        nbformat.write(build(title, cells), HERE / f"{name}.ipynb")


if __name__ == "__main__":
    main()

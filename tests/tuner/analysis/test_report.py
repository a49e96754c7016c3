"""``tune report``: PNG figures and index.html from a real tuning run's database; one-line errors otherwise."""

from __future__ import annotations

import subprocess
import sys

import pytest
from matplotlib.image import imread
from typer.testing import CliRunner

from tuner.cli import app

pytestmark = pytest.mark.slow  # tunes, builds or starts processes: left out of the fast tier


def test_report_of_a_tuning_run(tuned_db, tmp_path):
    out = tmp_path / "report"
    result = CliRunner().invoke(app, ["report", "--db", tuned_db, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "missing" not in result.output, result.output
    pngs = sorted(out.glob("*.png"))
    names = {p.stem for p in pngs}
    assert {"tuning_curves", "session_curves", "predicted_vs_measured", "ranking", "feature_importance",
            "model_versions", "measurements_over_time", "failures", "repeat_noise", "roofline"} <= names
    for png in pngs:
        pixels = imread(png)
        assert pixels.shape[0] > 100 and pixels.std() > 0.01, png  # a drawn figure, not a blank canvas
    page = (out / "index.html").read_text()
    assert all(f'src="{p.name}"' in page for p in pngs)
    assert "peak GFLOP/s" in page and "<table" in page


def test_report_of_one_workload_lists_what_is_missing(one_workload_db, tmp_path):
    result = CliRunner().invoke(app, ["report", "--db", one_workload_db, "--out", str(tmp_path), "--no-roofline"])
    assert result.exit_code == 0, result.output
    assert "missing session_curves: " in result.output and "no cost model version" in result.output
    assert (tmp_path / "tuning_curves.png").exists()
    assert "missing (model_versions)" in (tmp_path / "index.html").read_text()


@pytest.mark.parametrize(
    "db, message",
    [
        ("empty", "holds no measurements: run `tune run MODEL --db sqlite:///"),
        ("postgresql+psycopg://nobody@127.0.0.1:1/none", "connection"),
        ("sqlite:///{tmp}/missing.db", "no database file"),
    ],
    ids=["empty", "refused", "missing-file"],
)
def test_report_bad_input_is_one_line(db, message, empty_db, tmp_path):
    url = empty_db if db == "empty" else db.format(tmp=tmp_path)
    proc = subprocess.run([sys.executable, "-m", "tuner", "report", "--db", url, "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists()

"""Every notebook in notebooks/ runs headless (nbclient) against a real tuning run's database and an empty one."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # tunes, builds or starts processes: left out of the fast tier

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))
KERNEL = "tune-test-python"
# Figures each notebook must draw from a real run's database (tuning curves and
# session curves; predicted vs measured, ranking, importance, versions; over time,
# failures, noise; roofline).
FIGURES = {"01_tuning_curves": 2, "02_cost_model": 4, "03_database_overview": 3, "04_roofline": 1}


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    """A Jupyter kernel spec running this interpreter (the virtual environment's), found through JUPYTER_PATH."""
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "tune tests", "language": "python",
    }))
    old = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(root), old]))
    yield KERNEL
    if old is None:
        os.environ.pop("JUPYTER_PATH")
    else:
        os.environ["JUPYTER_PATH"] = old


def execute(path: Path, db_url: str, kernel: str, workdir: Path) -> nbformat.NotebookNode:
    """Run a notebook with ``db_url`` injected after its parameters cell (papermill's convention)."""
    nb = nbformat.read(path, as_version=4)
    at = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    injected = nbformat.v4.new_code_cell(f"db_url = {db_url!r}")
    injected.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(at + 1, injected)
    nbclient.NotebookClient(nb, timeout=600, kernel_name=kernel,
                            resources={"metadata": {"path": str(workdir)}}).execute()
    return nb


def outputs(nb) -> tuple[list[str], int]:
    """(printed text, number of PNG figures) of an executed notebook; fails on any error output."""
    text, figures = [], 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            assert out.output_type != "error", f"{out.ename}: {out.evalue}"
            if out.output_type == "stream":
                text.append(out.text)
            elif "image/png" in out.get("data", {}):
                figures += 1
    return text, figures


def test_notebooks_exist_with_a_parameters_cell():
    assert [p.stem for p in NOTEBOOKS] == sorted(FIGURES)
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(params) == 1 and "db_url = None" in params[0].source
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "outputs are stripped"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_on_a_tuning_run(path, tuned_db, kernel, tmp_path):
    text, figures = outputs(execute(path, tuned_db, kernel, tmp_path))
    missing = [line for line in "".join(text).splitlines() if line.startswith("missing:")]
    assert not missing, missing
    assert figures >= FIGURES[path.stem]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_on_an_empty_database_says_what_is_missing(path, empty_db, kernel, tmp_path):
    text, figures = outputs(execute(path, empty_db, kernel, tmp_path))
    assert figures == 0
    assert any("missing:" in t and "holds no measurements" in t for t in text), text


def test_notebook_falls_back_to_the_local_file(tuned_db, kernel, tmp_path, monkeypatch):
    nb_path = next(p for p in NOTEBOOKS if p.stem == "03_database_overview")
    monkeypatch.delenv("TUNE_DB", raising=False)  # the kernel inherits the environment
    shutil.copy(tuned_db.removeprefix("sqlite:///"), tmp_path / "tune.db")
    text, figures = outputs(execute(nb_path, None, kernel, tmp_path))
    assert any("database: sqlite:///tune.db" in t for t in text) and figures >= 3

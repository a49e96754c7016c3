"""tuner.analysis: tables and figures from a real short tuning run's database, and what each says when data is
missing."""

from __future__ import annotations

import sqlite3

import numpy as np
import pandas as pd
import pytest

from database import open_database, upgrade
from measure.roofline import Roofline
from tuner.analysis import cost_model as acm
from tuner.analysis import plots
from tuner.analysis import roofline as arl
from tuner.analysis import tables as an

pytestmark = pytest.mark.slow  # tunes, builds or starts processes: left out of the fast tier


@pytest.fixture(scope="module")
def data(tuned_db):
    return an.load(tuned_db)


def test_overview_counts_match_the_database(data, tuned_db):
    conn = sqlite3.connect(f"file:{tuned_db.removeprefix('sqlite:///')}?mode=ro", uri=True)
    n_measure, n_ok = conn.execute("SELECT COUNT(*), SUM(status = 'ok') FROM measure_result").fetchone()
    conn.close()
    counts = dict(zip(an.overview(data).item, an.overview(data)["count"]))
    assert counts["measurements"] == n_measure > 0
    assert counts["successful measurements"] == n_ok > 0
    assert counts["sessions"] == 1 and counts["device keys"] == 1
    assert counts["cost model versions"] >= 1
    assert an.failures_by_status(data)["count"].sum() == n_measure
    assert an.measurements_over_time(data).to_numpy().sum() == n_measure
    assert an.models_table(data).measurements.sum() == n_measure
    assert an.targets_table(data).measurements.sum() == n_measure


def test_workloads_and_tuning_curves(data, tuned_db):
    table = an.workloads_table(data)
    assert len(table) == 2 and (table.best_s > 0).all() and (table.trials >= 1).all()
    assert (table.default_s >= table.best_s).all()  # the untuned default is always measured
    curves = an.tuning_curves(data)
    assert not an.has_metaschedule(data)
    for _, g in curves.groupby(["workload_hash", "key", "source"]):
        assert list(g.trial) == list(range(1, len(g) + 1))
        best = g.best_s.dropna().to_numpy()
        assert len(best) and (np.diff(best) <= 0).all()
        assert best[-1] == pytest.approx(g.median_s[g.status == "ok"].min())
    trials = data.measurements[~data.measurements.confirm]
    assert trials.groupby("workload_hash").size().sort_index().tolist() == [
        g.trial.max() for _, g in curves.groupby("workload_hash", sort=True)]  # re-measurements are not trials
    assert data.measurements.confirm.any(), "the run confirmed its leaders"
    db = open_database(tuned_db)
    (target,) = db.targets()
    best = {wh: db.best(wh, target.target_hash)[1] for wh in table.workload_hash}
    db.close()
    assert table.set_index("workload_hash").best_s.to_dict() == pytest.approx(best)  # the tuner's own figure
    sessions = an.session_curves(data)
    assert set(sessions.session_id) == set(data.measurements.session_id)
    for _, g in sessions.groupby("workloads"):
        assert (np.diff(g.total_best_s.dropna().to_numpy()) <= 0).all()


def test_repeat_noise_is_the_cv_of_stored_repeats(data):
    noise = an.repeat_noise(data)
    assert (noise.repeats >= 2).all() and (noise.cv >= 0).all()
    row = data.measurements.set_index("id").loc[noise.id.iloc[0]]
    t = np.asarray(row.times_s)
    assert noise.repeats.iloc[0] == len(t)
    assert noise.cv.iloc[0] == pytest.approx(t.std(ddof=1) / t.mean())


def test_cost_model_against_its_measurements(data):
    versions = acm.model_versions(data)
    assert (versions.record_count > 0).all()
    fit = acm.newest_model_fit(data)
    assert fit.model_id == versions.model_id.max()
    ok = an.require_measurements(data)
    assert len(fit.predictions) == ok.candidate_hash.nunique()
    assert (fit.predictions.predicted_s > 0).all()
    ranking = acm.ranking_per_workload(fit)
    assert ((ranking.top1 > 0) & (ranking.top1 <= 1)).all() and (ranking.candidates >= 2).all()
    importance = acm.feature_importance(fit, top=5)
    assert 1 <= len(importance) <= 5 and importance.gain.is_monotonic_decreasing
    assert set(importance.feature) <= set(acm.feature_names())
    error = acm.prediction_error(fit)
    assert error["in_sample_median_ratio_error"] >= 1 and error["heldout_median_ratio_error"] >= 1
    assert fit.predictions.heldout_predicted_s.notna().all() and (fit.predictions.heldout_predicted_s > 0).all()


def test_roofline_points_sit_under_the_roofline_formula(data):
    peaks = Roofline(peak_flops_per_s=1e11, bandwidth_bytes_per_s=1e10, cores=2)
    points = arl.roofline_points(data, peaks)
    assert (points.flops > 0).all()
    expected = np.minimum(1e11, 1e10 * points.flops / points.bytes_moved)
    assert np.allclose(points.attainable_flops_per_s, expected)
    assert np.allclose(points.achieved_flops_per_s * points.best_s, points.flops)
    assert set(points.bound) <= {"memory", "compute"}


def test_every_figure_has_data(data):
    peaks = Roofline(peak_flops_per_s=1e11, bandwidth_bytes_per_s=1e10, cores=2)
    fit = acm.newest_model_fit(data)
    figures = [
        plots.tuning_curves(an.tuning_curves(data)),
        plots.session_curves(an.session_curves(data)),
        plots.predicted_vs_measured(fit.predictions),
        plots.ranking_metrics(acm.ranking_per_workload(fit)),
        plots.feature_importance(acm.feature_importance(fit)),
        plots.model_versions(acm.model_versions(data)),
        plots.measurements_over_time(an.measurements_over_time(data)),
        plots.failures(an.failures_by_status(data)),
        plots.repeat_noise(an.repeat_noise(data)),
        plots.roofline(arl.roofline_points(data, peaks), peaks),
    ]
    assert all(fig.axes[0].has_data() for fig in figures)


def test_an_empty_plot_is_refused():
    empty = pd.DataFrame(columns=["session_id", "key", "trial", "total_best_s"])
    with pytest.raises(an.AnalysisError, match="^nothing to plot"):
        plots.session_curves(empty)


def test_empty_database_says_it_holds_no_measurements(empty_db):
    data = an.load(empty_db)
    for fn in (an.overview, an.tuning_curves, an.workloads_table, an.repeat_noise, acm.model_versions):
        with pytest.raises(an.AnalysisError, match="holds no measurements: run `tune run MODEL --db sqlite:///"):
            fn(data)


def test_one_workload_database(one_workload_db):
    data = an.load(one_workload_db)
    assert len(an.workloads_table(data)) == 1
    assert an.tuning_curves(data).best_s.notna().any()
    with pytest.raises(an.AnalysisError, match="no measurement made by a tuning session"):
        an.session_curves(data)
    with pytest.raises(an.AnalysisError, match="no cost model version"):
        acm.model_versions(data)


def test_metaschedule_curves_beside_ours(tuned_db, tmp_path, copy_workload):
    url = f"sqlite:///{tmp_path / 'both.db'}"
    copy_workload(tuned_db, url, session_source="qwen3-tiny prefill")
    copy_workload(tuned_db, url, session_source="MetaSchedule log tuning_record.json")
    data = an.load(url)
    assert an.has_metaschedule(data)
    curves = an.tuning_curves(data)
    ours, theirs = (curves[curves.source == s] for s in (an.OURS, an.METASCHEDULE))
    assert len(ours) == len(theirs) > 0 and list(theirs.trial) == list(range(1, len(theirs) + 1))
    fig = plots.tuning_curves(curves)
    assert sorted(line.get_linestyle() for line in fig.axes[0].get_lines()) == ["-", "--"]


def test_url_comes_from_the_argument_then_tune_db_then_the_local_file(monkeypatch):
    monkeypatch.setenv("TUNE_DB", "sqlite:///from-env.db")
    assert an.resolve_db_url("sqlite:///given.db") == "sqlite:///given.db"
    assert an.resolve_db_url(None) == "sqlite:///from-env.db"
    monkeypatch.delenv("TUNE_DB")
    assert an.resolve_db_url(None) == "sqlite:///tune.db"


@pytest.mark.parametrize(
    "url, message",
    [
        ("sqlite:///{tmp}/missing.db", "^no database file .*missing.db"),
        ("postgresql+psycopg://nobody@127.0.0.1:1/none",
         "^database postgresql\\+psycopg://nobody@127.0.0.1:1/none: .*refused"),
        ("mysql://x@y/z", "^unsupported database backend 'mysql'"),
        ("sqlite:///{tmp}/other.db", "is not a tuning database \\(no table measure_result\\)"),
        ("sqlite:///{tmp}/garbage.db", "file is not a database"),
        ("sqlite:///{tmp}/old.db", "made by an older version of tune: run `tune db upgrade --db sqlite:///"),
    ],
    ids=["missing-file", "refused", "unknown-backend", "foreign-sqlite", "not-sqlite", "older-revision"],
)
def test_unreadable_databases_fail_with_one_line(tmp_path, url, message):
    upgrade(f"sqlite:///{tmp_path}/old.db", revision="0002")
    conn = sqlite3.connect(tmp_path / "other.db")
    conn.execute("CREATE TABLE notes (x TEXT)")
    conn.close()
    (tmp_path / "garbage.db").write_text("not a database at all " * 100)
    with pytest.raises(an.AnalysisError, match=message) as err:
        an.load(url.format(tmp=tmp_path))
    assert "\n" not in str(err.value)


def test_postgresql_reads_like_sqlite(tuned_db, one_workload_db, postgres_url, copy_workload):
    copy_workload(tuned_db, postgres_url)
    on_pg, on_sqlite = an.load(postgres_url), an.load(one_workload_db)
    assert on_pg.url.startswith("postgresql+psycopg://")
    cols = ["workload", "trial", "status", "median_s", "best_s"]
    pd.testing.assert_frame_equal(an.tuning_curves(on_pg)[cols], an.tuning_curves(on_sqlite)[cols])
    pd.testing.assert_frame_equal(an.repeat_noise(on_pg).drop(columns="id"),
                                  an.repeat_noise(on_sqlite).drop(columns="id"))

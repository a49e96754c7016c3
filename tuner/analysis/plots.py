"""Matplotlib figures of the analysis tables, shared by the notebooks and ``tune report``.

Each function takes a table from :mod:`tuner.analysis.tables` (or its cost-model and
roofline siblings) and returns a new :class:`matplotlib.figure.Figure` (no
pyplot state). A figure with nothing drawn is never returned: an empty table
raises :class:`tuner.analysis.tables.AnalysisError` instead.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from database import MeasureStatus
from measure.roofline import Roofline

from .tables import METASCHEDULE, AnalysisError

MAX_LINES = 12


def _figure(width: float = 7.0, height: float = 4.2) -> tuple[Figure, object]:
    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.add_subplot()


def _done(fig: Figure, what: str) -> Figure:
    if not any(ax.has_data() for ax in fig.axes):
        raise AnalysisError(f"nothing to plot for {what}")
    return fig


def tuning_curves(curves: pd.DataFrame, max_workloads: int = MAX_LINES) -> Figure:
    """Best latency (us, log scale) versus trials, one line per workload (the ``max_workloads`` most trialled).

    MetaSchedule's curve of the same workload, where present, is dashed in the same colour.
    """
    fig, ax = _figure()
    ours = curves[curves.source != METASCHEDULE]
    top = ours.groupby("workload_hash").trial.max().sort_values(ascending=False).index[:max_workloads]
    colors = {wh: f"C{i % 10}" for i, wh in enumerate(top)}
    for (wh, _key, source), g in curves[curves.workload_hash.isin(top)].groupby(["workload_hash", "key", "source"]):
        g = g[g.best_s.notna()]
        if g.empty:
            continue
        label = f"{g.workload.iloc[0][:40]}" + (" (MetaSchedule)" if source == METASCHEDULE else "")
        ax.step(g.trial, g.best_s * 1e6, where="post", color=colors[wh],
                linestyle="--" if source == METASCHEDULE else "-", marker=".", label=label)
    ax.set(xlabel="trial", ylabel="best latency (us)", yscale="log", title="Tuning curves per workload")
    if ax.has_data():
        ax.legend(fontsize="x-small", loc="upper right")
    return _done(fig, "tuning curves (no workload has a successful measurement)")


def session_curves(curves: pd.DataFrame) -> Figure:
    """Per session: the sum of its workloads' best latencies (us) versus the session's trials."""
    fig, ax = _figure()
    for (session, key), g in curves.groupby(["session_id", "key"]):
        g = g[g.total_best_s.notna()]
        if not g.empty:
            ax.step(g.trial, g.total_best_s * 1e6, where="post", label=f"session {session} ({key})")
    ax.set(xlabel="trial in session", ylabel="sum of best kernel latencies (us)", yscale="log",
           title="Tuning curves per session")
    if ax.has_data():
        ax.legend(fontsize="x-small")
    return _done(fig, "session curves (no session has a successful measurement)")


def predicted_vs_measured(predictions: pd.DataFrame) -> Figure:
    """Held-out predicted against measured latency (us, log-log), with the line of perfect prediction.

    Each point's prediction comes from a model that never saw its workload
    (``heldout_predicted_s``, :func:`tuner.analysis.cost_model.heldout_predictions`).

    Raises
    ------
    AnalysisError
        When no row has a held-out prediction (measurements of one workload only).
    """
    known = predictions[predictions.heldout_predicted_s.notna()]
    if known.empty:
        raise AnalysisError("held-out predictions need measurements of at least two workloads")
    fig, ax = _figure(5.5, 5.0)
    m, p = known.measured_s * 1e6, known.heldout_predicted_s * 1e6
    ax.scatter(m, p, s=12, alpha=0.7)
    lo, hi = float(min(m.min(), p.min())), float(max(m.max(), p.max()))
    ax.plot([lo, hi], [lo, hi], color="grey", linewidth=1, label="predicted = measured")
    ax.set(xscale="log", yscale="log", xlabel="measured latency (us)",
           ylabel="predicted latency (us), workload held out",
           title=f"Cost model: held-out predicted vs measured ({known.workload_hash.nunique()} workloads)")
    ax.legend(fontsize="small")
    return _done(fig, "predicted vs measured")


def ranking_metrics(ranking: pd.DataFrame) -> Figure:
    """Top-1 score and pairwise accuracy per workload (bars)."""
    fig, ax = _figure(7.0, max(2.5, 0.3 * len(ranking) + 1.5))
    y = np.arange(len(ranking))
    ax.barh(y - 0.2, ranking.top1, height=0.4, label="top-1 score")
    ax.barh(y + 0.2, ranking.pairwise.fillna(0.5), height=0.4, label="pairwise accuracy")
    ax.set_yticks(y, [str(w)[:40] for w in ranking.workload], fontsize="x-small")
    ax.set(xlim=(0, 1.05), xlabel="1 is perfect", title="Cost model ranking per workload")
    ax.legend(fontsize="small")
    return _done(fig, "ranking metrics")


def feature_importance(importance: pd.DataFrame) -> Figure:
    """Gain share of the most important features (horizontal bars, largest on top)."""
    fig, ax = _figure(7.0, max(2.5, 0.28 * len(importance) + 1.2))
    imp = importance.iloc[::-1]
    ax.barh(np.arange(len(imp)), imp.share)
    ax.set_yticks(np.arange(len(imp)), list(imp.feature), fontsize="x-small")
    ax.set(xlabel="share of total gain", title="Cost model feature importance")
    return _done(fig, "feature importance")


def model_versions(versions: pd.DataFrame) -> Figure:
    """Training records of each stored model version over time (and held-out top-1 where stored)."""
    fig, ax = _figure()
    for key, g in versions.groupby("key"):
        ax.plot(g.created_at, g.record_count, marker="o", label=f"records ({key})")
    ax.set(xlabel="stored at (UTC)", ylabel="training records", title="Cost model versions")
    top1 = next((c for c in versions.columns if c.split(".")[-1] == "top1" and versions[c].notna().any()), None)
    if top1:
        ax2 = ax.twinx()
        ax2.plot(versions.created_at, versions[top1], color="C3", marker="s", linestyle=":", label="held-out top-1")
        ax2.set(ylabel="held-out top-1 score", ylim=(0, 1.05))
        ax2.legend(fontsize="x-small", loc="lower right")
    ax.legend(fontsize="x-small", loc="upper left")
    fig.autofmt_xdate()
    return _done(fig, "cost model versions")


def measurements_over_time(counts: pd.DataFrame) -> Figure:
    """Measurements per time bucket, stacked by status."""
    fig, ax = _figure()
    x = np.arange(len(counts))
    bottom = np.zeros(len(counts))
    for status in counts.columns:
        ax.bar(x, counts[status], bottom=bottom, label=status, color="C2" if status == MeasureStatus.OK else None)
        bottom += counts[status].to_numpy()
    step = max(1, len(x) // 8)
    ax.set_xticks(x[::step], [t.strftime("%m-%d %H:%M") for t in counts.index[::step]], fontsize="x-small")
    ax.set(xlabel="time (UTC)", ylabel="measurements", title="Measurements over time")
    ax.legend(fontsize="small")
    return _done(fig, "measurements over time")


def failures(by_status: pd.DataFrame) -> Figure:
    """Measurements per status (bars)."""
    fig, ax = _figure(6.0, 3.5)
    ax.bar(by_status.status, by_status["count"],
           color=["C2" if s == MeasureStatus.OK else "C3" for s in by_status.status])
    ax.set(ylabel="measurements", title="Measurements by status")
    return _done(fig, "failures by status")


def repeat_noise(noise: pd.DataFrame) -> Figure:
    """Histogram of the coefficient of variation (%) of each measurement's repeats."""
    fig, ax = _figure(6.0, 3.5)
    ax.hist(noise.cv * 100, bins=min(40, max(5, len(noise) // 3)))
    ax.set(xlabel="coefficient of variation of repeats (%)", ylabel="measurements", title="Measurement noise")
    return _done(fig, "measurement noise")


def roofline(points: pd.DataFrame, peaks: Roofline) -> Figure:
    """Kernels' achieved GFLOP/s against arithmetic intensity under this machine's measured roofline (log-log)."""
    fig, ax = _figure(6.5, 4.8)
    lo = min(points.intensity.min(), peaks.ridge_intensity) / 4
    hi = max(points.intensity.max(), peaks.ridge_intensity) * 4
    x = np.geomspace(lo, hi, 200)
    ax.plot(x, peaks.attainable_flops_per_s(x) / 1e9, color="black", label="roofline (measured)")
    for kind, g in points.groupby("op_kind"):
        ax.scatter(g.intensity, g.achieved_flops_per_s / 1e9, s=18, label=kind)
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOPs/byte)", ylabel="GFLOP/s",
           title=f"Roofline: {peaks.peak_flops_per_s / 1e9:.0f} GFLOP/s, {peaks.bandwidth_bytes_per_s / 1e9:.1f} GB/s")
    ax.legend(fontsize="x-small")
    return _done(fig, "roofline")

"""Analysis of a tuning database as pandas DataFrames: the logic behind the notebooks and ``tune report``.

:func:`load` reads a database (any URL ``database.open_database`` accepts, read
only) into a :class:`TuningData`; the functions here and in
:mod:`tuner.analysis.cost_model` and :mod:`tuner.analysis.roofline` turn it into
tables, and :mod:`tuner.analysis.plots` draws them. Whatever a table needs and
the database lacks (no measurements, one workload, no cost model) raises
:class:`AnalysisError` with a one-line message naming what is missing;
:func:`report_missing` prints that message in a notebook instead of a traceback.

Latencies are seconds (the median over a measurement's repeats), FLOPs and bytes
are per kernel call, throughput is FLOP/s.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pandas as pd

from database import CONFIRM_FAILURES, DEFAULT_TRACE_JSON, DatabaseError, MeasureStatus
from database.frames import read_frames
from database.session import DEFAULT_URL, URL_ENV

METASCHEDULE = "metaschedule"
OURS = "tune"


class AnalysisError(RuntimeError):
    """The database lacks what an analysis needs; the message (one line) says what."""


@contextmanager
def report_missing() -> Iterator[None]:
    """In a notebook cell: print ``missing: <reason>`` for an :class:`AnalysisError` instead of failing."""
    try:
        yield
    except AnalysisError as err:
        print(f"missing: {err}")


@dataclass(frozen=True)
class TuningData:
    """A tuning database read into DataFrames (one row per database row).

    Attributes
    ----------
    url : str
        The database URL, password hidden.
    measurements : pd.DataFrame
        One row per measurement, oldest first: ``id``, ``created_at``, ``status``,
        ``median_s``, ``mean_s``, ``min_s``, ``stdev_s`` (seconds), ``times_s`` (list of
        repeat times, seconds), ``build_time_s``, ``error``, ``worker``, ``session_id``,
        ``candidate_hash``, ``is_default`` (the untuned schedule), ``workload_hash``,
        ``workload`` (name), ``op_kind``, ``flops``, ``bytes_moved``, ``target_hash``,
        ``target_json``, ``key`` (the RPC key), ``model_source`` and ``source``
        (``"tune"``, or ``"metaschedule"`` for records imported by ``tune db import``: their
        worker, or their session's model source or arguments, names MetaSchedule).
    sessions : pd.DataFrame
        ``session_id``, ``model_source``, ``model_hash``, ``status``, ``started_at``, ``ended_at``.
    workloads : pd.DataFrame
        ``workload_hash``, ``workload``, ``op_kind``, ``flops``, ``bytes_moved``.
    targets : pd.DataFrame
        ``target_hash``, ``target_json``, ``key``.
    cost_models : pd.DataFrame
        ``model_id``, ``created_at``, ``target_hash``, ``key``, ``feature_version``,
        ``record_count``, ``metrics`` (dict); the boosters are not loaded.
    """

    url: str
    measurements: pd.DataFrame
    sessions: pd.DataFrame
    workloads: pd.DataFrame
    targets: pd.DataFrame
    cost_models: pd.DataFrame


def resolve_db_url(db_url: str | None = None) -> str:
    """``db_url``, else the ``TUNE_DB`` environment variable, else ``sqlite:///tune.db`` (the local file)."""
    return db_url or os.environ.get(URL_ENV) or DEFAULT_URL


def load(db_url: str | None = None) -> TuningData:
    """Read a tuning database into :class:`TuningData` (read only; nothing is created or migrated).

    Parameters
    ----------
    db_url : str, optional
        A SQLAlchemy URL (SQLite or PostgreSQL); default from :func:`resolve_db_url`.

    Raises
    ------
    AnalysisError
        When the URL is malformed or does not connect, the SQLite file does not
        exist, or the database holds no tuning tables.
    """
    try:
        shown, frames = read_frames(resolve_db_url(db_url))
    except DatabaseError as err:
        raise AnalysisError(str(err)) from None
    return _assemble(shown, frames)


def _is_metaschedule(*texts) -> bool:
    return any(isinstance(t, str) and METASCHEDULE in t.lower() for t in texts)


def _assemble(url: str, f: dict[str, pd.DataFrame]) -> TuningData:
    sessions = f["sessions"]
    sessions["source"] = [
        METASCHEDULE if _is_metaschedule(src, args) else OURS for src, args in zip(sessions.model_source, sessions.args)
    ]
    m = f["measurements"]
    m["times_s"] = [json.loads(t) for t in m.times_s]
    m["confirm"] = m.confirm.astype(bool)
    m["is_default"] = m.pop("trace_json") == DEFAULT_TRACE_JSON
    m = m.merge(f["workloads"], on="workload_hash", how="left").merge(f["targets"], on="target_hash", how="left")
    m = m.merge(sessions[["session_id", "model_source", "source"]], on="session_id", how="left")
    # `tune db import` files MetaSchedule's records with no session and worker "metaschedule".
    m["source"] = [
        METASCHEDULE if _is_metaschedule(w) or s == METASCHEDULE else OURS for w, s in zip(m.worker, m.source)
    ]
    m["created_at"] = pd.to_datetime(m.created_at)
    cost_models = f["cost_models"]
    cost_models["metrics"] = [json.loads(x) for x in cost_models.metrics]
    cost_models["created_at"] = pd.to_datetime(cost_models.created_at)
    return TuningData(
        url=url,
        measurements=m.sort_values("id", kind="stable").reset_index(drop=True),
        sessions=sessions.drop(columns=["args"]),
        workloads=f["workloads"],
        targets=f["targets"],
        cost_models=cost_models,
    )


# -- guards -------------------------------------------------------------------


def require_measurements(data: TuningData | None, ok: bool = True) -> pd.DataFrame:
    """The measurements (only ``ok`` ones with a time when ``ok``); raises :class:`AnalysisError` when there are
    none."""
    if data is None:
        raise AnalysisError("no database loaded (see the error above)")
    m = data.measurements
    if m.empty:
        raise AnalysisError(f"{data.url} holds no measurements: run `tune run MODEL --db {data.url}` first")
    if ok:
        m = m[(m.status == MeasureStatus.OK) & m.median_s.notna() & (m.median_s > 0)]
        if m.empty:
            raise AnalysisError(f"{data.url} holds no successful measurement "
                                "(every one failed; see the failures table)")
    return m


def candidate_latencies(data: TuningData | None) -> pd.DataFrame:
    """Per candidate, target key and workload: its latency as the tuner counts it (``database.candidate_latency``).

    The median over the medians of its ``ok`` measurements; candidates with a
    ``wrong_result``, or a re-measurement that failed (``database.CONFIRM_FAILURES``),
    are left out. Columns: ``workload_hash``, ``key``, ``candidate_hash``, ``is_default``,
    ``median_s`` (seconds), plus the first measurement's other columns.

    Raises
    ------
    AnalysisError
        When there is no successful measurement.
    """
    m = require_measurements(data, ok=False)
    ok = require_measurements(data)
    ids = ["candidate_hash", "target_hash"]
    failed = m[(m.status == MeasureStatus.WRONG_RESULT)
               | (m.confirm & m.status.isin(CONFIRM_FAILURES))][ids].drop_duplicates()
    ok = ok.merge(failed.assign(_failed=True), on=ids, how="left")
    ok = ok[ok._failed.isna()].drop(columns="_failed")
    if ok.empty:
        raise AnalysisError(f"{data.url}: every successfully measured candidate failed later")
    groups = ok.groupby(["workload_hash", "key", "candidate_hash", "target_hash"], sort=False)
    first = groups.head(1).set_index(["workload_hash", "key", "candidate_hash", "target_hash"])
    first["median_s"] = groups.median_s.median()
    return first.reset_index()


# -- database overview --------------------------------------------------------


def overview(data: TuningData | None) -> pd.DataFrame:
    """Counts of what the database holds: ``item``, ``count`` (models, sessions, workloads, ...)."""
    m = require_measurements(data, ok=False)
    counts = {
        "models": data.sessions.model_hash.nunique(),
        "sessions": len(data.sessions),
        "workloads": data.workloads.shape[0],
        "workloads measured": m.workload_hash.nunique(),
        "targets": data.targets.target_json.nunique(),
        "device keys": data.targets.key.nunique(),
        "workers": m.worker.nunique(),
        "candidates measured": m.candidate_hash.nunique(),
        "measurements": len(m),
        "successful measurements": int((m.status == MeasureStatus.OK).sum()),
        "cost model versions": len(data.cost_models),
    }
    return pd.DataFrame({"item": list(counts), "count": list(counts.values())})


def models_table(data: TuningData | None) -> pd.DataFrame:
    """Per model (source text): ``model_source``, ``sessions``, ``measurements``, ``first``, ``last`` session start."""
    m = require_measurements(data, ok=False)
    per = data.sessions.groupby("model_source").agg(
        sessions=("session_id", "count"), first=("started_at", "min"), last=("started_at", "max")
    )
    per["measurements"] = m.groupby("model_source").size().reindex(per.index, fill_value=0)
    return per.reset_index()[["model_source", "sessions", "measurements", "first", "last"]]


def targets_table(data: TuningData | None) -> pd.DataFrame:
    """Per target and device key: ``target_json``, ``key``, ``workers``, ``workloads``, ``measurements``."""
    m = require_measurements(data, ok=False)
    return (
        m.groupby(["target_json", "key"])
        .agg(workers=("worker", "nunique"), workloads=("workload_hash", "nunique"), measurements=("id", "count"))
        .reset_index()
    )


def workloads_table(data: TuningData | None) -> pd.DataFrame:
    """Per measured workload and target key: name, kind, FLOPs, bytes, trials, best and default latency (s), speed-up.

    Columns: ``workload_hash``, ``workload``, ``op_kind``, ``key``, ``flops``, ``bytes_moved``,
    ``trials`` (measurements of any status, re-measurements of leaders not counted), ``best_s``,
    ``default_s`` (the untuned schedule), ``speedup`` (default / best), ``best_gflops`` (FLOPs / best_s / 1e9).
    A candidate's latency is the median over its successful measurements, as the tuner counts it
    (``database.candidate_latency``).
    """
    m = require_measurements(data, ok=False)
    keys = ["workload_hash", "workload", "op_kind", "key", "flops", "bytes_moved"]
    out = m[~m.confirm].groupby(keys).agg(trials=("id", "count")).reset_index()
    per = candidate_latencies(data)
    best = per.groupby(["workload_hash", "key"]).median_s.min().rename("best_s")
    default = per[per.is_default].groupby(["workload_hash", "key"]).median_s.min().rename("default_s")
    out = out.join(best, on=["workload_hash", "key"]).join(default, on=["workload_hash", "key"])
    out["speedup"] = out.default_s / out.best_s
    out["best_gflops"] = out.flops / out.best_s / 1e9
    return out.sort_values("flops", ascending=False, kind="stable").reset_index(drop=True)


def _time_bucket(times: pd.Series) -> str:
    span = (times.max() - times.min()).total_seconds()
    return "min" if span <= 6 * 3600 else "h" if span <= 7 * 86400 else "D"


def measurements_over_time(data: TuningData | None, freq: str | None = None) -> pd.DataFrame:
    """Measurements per time bucket and status: index ``created_at`` (bucket start), one column per status.

    ``freq`` is a pandas frequency (``"min"``, ``"h"``, ``"D"``); by default minutes for
    a span up to 6 h, hours up to a week, days beyond.
    """
    m = require_measurements(data, ok=False)
    freq = freq or _time_bucket(m.created_at)
    return m.groupby([m.created_at.dt.floor(freq), "status"]).size().unstack("status", fill_value=0)


def failures_by_status(data: TuningData | None) -> pd.DataFrame:
    """Per status: ``status``, ``count``, ``share`` (of all measurements), ``example`` (first error message)."""
    m = require_measurements(data, ok=False)
    out = m.groupby("status").agg(count=("id", "count"), example=("error", lambda e: next((x for x in e if x), "")))
    out["share"] = out["count"] / len(m)
    out["example"] = out.example.str.split("\n").str[0].str.slice(0, 160)
    return out.reset_index()[["status", "count", "share", "example"]].sort_values("count", ascending=False)


def repeat_noise(data: TuningData | None) -> pd.DataFrame:
    """Coefficient of variation of each successful measurement's repeats.

    Columns: ``id``, ``workload``, ``key``, ``repeats``, ``median_s``, ``cv`` (sample
    standard deviation / mean of the raw repeat times, ddof=1). Measurements with
    fewer than two repeats are left out.

    Raises
    ------
    AnalysisError
        When no successful measurement has two or more repeats.
    """
    ok = require_measurements(data)
    rows = []
    for row in ok.itertuples():
        t = np.asarray(row.times_s, float)
        if len(t) >= 2 and t.mean() > 0:
            rows.append((row.id, row.workload, row.key, len(t), row.median_s, float(t.std(ddof=1) / t.mean())))
    if not rows:
        raise AnalysisError("no successful measurement has two or more repeats (measure with --repeat 2 or more)")
    return pd.DataFrame(rows, columns=["id", "workload", "key", "repeats", "median_s", "cv"])


# -- tuning curves ------------------------------------------------------------


def tuning_curves(data: TuningData | None) -> pd.DataFrame:
    """Best latency so far versus trials, per workload, target key and source (ours or MetaSchedule).

    Trials are every measurement of the workload on that key from that source, in
    database order (failures count as trials and keep the best so far), by each
    candidate's first measurement: re-measurements of the leaders are not trials.

    Columns: ``workload_hash``, ``workload``, ``key``, ``source``, ``trial`` (1-based),
    ``status``, ``median_s``, ``best_s`` (NaN until the first success), ``best_gflops``.
    """
    m = require_measurements(data, ok=False)
    require_measurements(data)
    m = m[~m.confirm]
    keys = ["workload_hash", "key", "source"]
    c = m[keys + ["workload", "status", "median_s", "flops", "id"]].copy()
    c["trial"] = c.groupby(keys).cumcount() + 1
    good = c.median_s.where((c.status == MeasureStatus.OK) & (c.median_s > 0))
    c["best_s"] = good.groupby([c[k] for k in keys]).cummin()
    c["best_gflops"] = c.flops / c.best_s / 1e9
    return c.drop(columns=["id", "flops"]).reset_index(drop=True)


def has_metaschedule(data: TuningData | None) -> bool:
    """True when the database holds measurements imported from MetaSchedule logs."""
    return bool((require_measurements(data, ok=False).source == METASCHEDULE).any())


def session_curves(data: TuningData | None) -> pd.DataFrame:
    """Per session: the sum over its workloads of the session's best latency so far, versus its trials.

    Within a session, trial ``n`` is its ``n``-th measurement (re-measurements of
    leaders are not trials and left out); ``total_best_s`` is the
    sum over the workloads measured so far of their best ``ok`` latency in this
    session (seconds, one call of each kernel), and ``workloads`` how many that sum
    covers. Columns: ``session_id``, ``model_source``, ``key``, ``trial``, ``workloads``, ``total_best_s``.
    """
    m = require_measurements(data, ok=False)
    m = m[m.session_id.notna() & ~m.confirm]
    if m.empty:
        raise AnalysisError(f"{data.url} holds no measurement made by a tuning session")
    rows = []
    for (session, key), g in m.groupby(["session_id", "key"], sort=True):
        best: dict[str, float] = {}
        for trial, row in enumerate(g.itertuples(), start=1):
            if row.status == MeasureStatus.OK and row.median_s and row.median_s > 0:
                best[row.workload_hash] = min(best.get(row.workload_hash, np.inf), row.median_s)
            rows.append((int(session), row.model_source, key, trial, len(best), sum(best.values()) if best else np.nan))
    return pd.DataFrame(rows, columns=["session_id", "model_source", "key", "trial", "workloads", "total_best_s"])


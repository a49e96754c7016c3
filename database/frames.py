"""A tuning database's tables as pandas DataFrames, read only: what the analysis reads.

Nothing is created or migrated: a database that is missing, not a tuning
database or older than this code is refused with a :class:`DatabaseError`
whose one-line message says which command to run.

Kept out of ``database/__init__`` so that opening a database never imports pandas.
"""

from __future__ import annotations

import os

import pandas as pd
from sqlalchemy import Engine, Select, inspect, select

from .models import (
    Candidate,
    CostModelVersion,
    MeasureResult,
    Target,
    TuningSession,
    Workload,
)
from .session import (
    DatabaseError,
    create_engine_for,
    display_url,
    resolve_url,
    transaction,
)

__all__ = ["TABLES", "read_frames"]

#: The tables a tuning database must hold to be read.
TABLES = ("measure_result", "candidate", "workload", "target", "session", "cost_model_version")


def read_frames(db_url: str | None = None) -> tuple[str, dict[str, pd.DataFrame]]:
    """Read a tuning database's rows into DataFrames (read only): measurements, sessions, workloads, targets, cost
    models.

    Parameters
    ----------
    db_url : str, optional
        A SQLAlchemy URL (SQLite or PostgreSQL); default as :func:`database.session.resolve_url`.

    Returns
    -------
    url : str
        The database URL, password hidden.
    frames : dict of str to pd.DataFrame
        One row per database row, oldest first, JSON columns as text:

        - ``measurements``: ``id``, ``created_at``, ``status``, ``median_s``,
          ``mean_s``, ``min_s``, ``stdev_s`` (seconds), ``times_s`` (JSON list of
          seconds), ``build_time_s``, ``error``, ``worker``, ``session_id``,
          ``confirm``, ``candidate_hash``, ``trace_json``, ``workload_hash``, ``target_hash``;
        - ``sessions``: ``session_id``, ``model_source``, ``model_hash``, ``args``
          (JSON), ``status``, ``started_at``, ``ended_at``;
        - ``workloads``: ``workload_hash``, ``workload`` (name), ``op_kind``, ``flops``, ``bytes_moved``;
        - ``targets``: ``target_hash``, ``target_json``, ``key``;
        - ``cost_models``: ``model_id``, ``created_at``, ``target_hash``, ``key``,
          ``feature_version``, ``record_count``, ``metrics`` (JSON); no booster.

    Raises
    ------
    DatabaseError
        When the URL is malformed or does not connect, the SQLite file does not
        exist, the database holds no tuning tables, or its schema predates the
        ``confirm`` column (run ``tune db upgrade``).
    """
    engine, shown = _read_engine(db_url)
    try:
        with transaction(engine, write=False) as conn:
            missing = [t for t in TABLES if not inspect(conn).has_table(t)]
            if missing:
                raise DatabaseError(f"{shown} is not a tuning database (no table {missing[0]}): "
                                    f"run `tune db upgrade --db {shown}`")
            if "confirm" not in {c["name"] for c in inspect(conn).get_columns("measure_result")}:
                raise DatabaseError(f"{shown} was made by an older version of tune: run `tune db upgrade --db {shown}`")
            frames = {name: pd.read_sql(query, conn) for name, query in _queries().items()}
    finally:
        engine.dispose()
    return shown, frames


def _read_engine(db_url: str | None) -> tuple[Engine, str]:
    """An engine on ``db_url`` and the URL shown; a SQLite file must exist (connecting would create it)."""
    url = resolve_url(db_url)
    shown = display_url(url)
    if url.get_backend_name() == "sqlite":
        path = url.database or ""
        if path in ("", ":memory:") or not os.path.isfile(path):
            raise DatabaseError(f"no database file {path or '(none)'} for {shown}: "
                                f"run `tune run ... --db {shown}` first")
    return create_engine_for(url), shown


def _queries() -> dict[str, Select]:
    return {
        "measurements": select(
            MeasureResult.id, MeasureResult.created_at, MeasureResult.status, MeasureResult.median_s,
            MeasureResult.mean_s, MeasureResult.min_s, MeasureResult.stdev_s, MeasureResult.times_s,
            MeasureResult.build_time_s, MeasureResult.error, MeasureResult.worker, MeasureResult.session_id,
            MeasureResult.confirm, Candidate.candidate_hash, Candidate.trace_json, Workload.workload_hash,
            Target.target_hash,
        )
        .join(Candidate, Candidate.id == MeasureResult.candidate_id)
        .join(Workload, Workload.id == Candidate.workload_id)
        .join(Target, Target.id == MeasureResult.target_id)
        .order_by(MeasureResult.id),
        "sessions": select(
            TuningSession.id.label("session_id"), TuningSession.model_source, TuningSession.model_hash,
            TuningSession.args, TuningSession.status, TuningSession.started_at, TuningSession.ended_at,
        ).order_by(TuningSession.id),
        "workloads": select(
            Workload.workload_hash, Workload.name.label("workload"), Workload.op_kind, Workload.flops,
            Workload.bytes_moved,
        ).order_by(Workload.id),
        "targets": select(Target.target_hash, Target.target_json, Target.key).order_by(Target.id),
        "cost_models": select(
            CostModelVersion.id.label("model_id"), CostModelVersion.created_at, Target.target_hash, Target.key,
            CostModelVersion.feature_version, CostModelVersion.record_count, CostModelVersion.metrics,
        )
        .join(Target, Target.id == CostModelVersion.target_id)
        .order_by(CostModelVersion.id),
    }

"""SQLAlchemy 2 typed models: the tuning database schema.

These ORM classes stay inside ``database/``; other packages see only the records
in :mod:`database.records`. JSON-valued columns hold canonical JSON text so that
every backend (and every notebook) reads them the same way. Timestamps are naive
UTC, taken from the database's clock (:class:`utcnow`), never the client's.

Rows keyed by a hash (target, workload, candidate, graph_candidate) are written
once and never updated, except the two latency columns of ``graph_candidate``.
``measure_result`` and ``program_timing`` are append-only: a repeated measurement is a new row.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    false,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.sql.functions import FunctionElement

from .status import SESSION_STATUSES, SessionStatus

HASH = String(128)


class utcnow(FunctionElement):  # noqa: N801 (an SQL function name)
    """The database server's current time as naive UTC, with sub-second precision."""

    type = DateTime()
    inherit_cache = True


@compiles(utcnow, "postgresql")
def _pg_utcnow(element, compiler, **kw) -> str:
    return "TIMEZONE('utc', STATEMENT_TIMESTAMP())"


@compiles(utcnow, "sqlite")
def _sqlite_utcnow(element, compiler, **kw) -> str:
    # SQLAlchemy's own SQLite DATETIME text form, so comparisons stay lexicographic.
    return "STRFTIME('%Y-%m-%d %H:%M:%f000', 'now')"


@compiles(utcnow)
def _default_utcnow(element, compiler, **kw) -> str:
    return "CURRENT_TIMESTAMP"


class Base(DeclarativeBase):
    """Declarative base of every tuning-database table."""

    # Named constraints, so later migrations (and SQLite batch mode) can address them.
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(column_0_label)s",
            "uq": "uq_%(table_name)s_%(column_0_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class Target(Base):
    """A compilation target and an RPC device key (a pool of identical devices)."""

    __tablename__ = "target"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    target_hash: Mapped[str] = mapped_column(HASH, unique=True)
    target_json: Mapped[str] = mapped_column(Text)
    key: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow())


class Workload(Base):
    """One kernel (PrimFunc), keyed by its structural hash."""

    __tablename__ = "workload"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workload_hash: Mapped[str] = mapped_column(HASH, unique=True)
    name: Mapped[str] = mapped_column(Text)
    op_kind: Mapped[str] = mapped_column(String(32))
    script: Mapped[str] = mapped_column(Text)
    shapes_json: Mapped[str] = mapped_column(Text)
    flops: Mapped[float] = mapped_column(Float)
    bytes_moved: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow())


class Candidate(Base):
    """A schedule (``s_tir`` trace JSON) of a workload."""

    __tablename__ = "candidate"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    candidate_hash: Mapped[str] = mapped_column(HASH, unique=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workload.id"), index=True)
    trace_json: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow())


class TuningSession(Base):
    """One ``tune`` invocation."""

    __tablename__ = "session"
    __table_args__ = (
        CheckConstraint(
            f"status IN ({', '.join(repr(s.value) for s in SESSION_STATUSES)})",
            name="status",
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    args: Mapped[str] = mapped_column(Text)  # JSON object
    model_source: Mapped[str] = mapped_column(Text)
    model_hash: Mapped[str] = mapped_column(HASH, index=True)
    code_version: Mapped[str] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(16), default=SessionStatus.RUNNING.value)
    started_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow())
    heartbeat_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow())
    ended_at: Mapped[datetime | None] = mapped_column(DateTime)


class MeasureResult(Base):
    """One measurement of a candidate on a target (append-only)."""

    __tablename__ = "measure_result"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidate.id"), index=True)
    target_id: Mapped[int] = mapped_column(ForeignKey("target.id"), index=True)
    session_id: Mapped[int | None] = mapped_column(ForeignKey("session.id"), index=True)
    status: Mapped[str] = mapped_column(String(32))
    times_s: Mapped[str] = mapped_column(Text)  # JSON list of repeat times, seconds
    median_s: Mapped[float | None] = mapped_column(Float)
    mean_s: Mapped[float | None] = mapped_column(Float)
    min_s: Mapped[float | None] = mapped_column(Float)
    stdev_s: Mapped[float | None] = mapped_column(Float)
    build_time_s: Mapped[float] = mapped_column(Float, default=0.0)
    error: Mapped[str] = mapped_column(Text, default="")
    worker: Mapped[str] = mapped_column(String(255), default="")
    # A re-measurement of a measured candidate (its kernel's leaders confirmed), not a trial.
    confirm: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow())


Index("ix_measure_result_target_candidate", MeasureResult.target_id, MeasureResult.candidate_id)


class CandidateClaim(Base):
    """A session's claim to measure a candidate on a target (at most one holder).

    A claim is taken before the candidate is measured and marked measured in the
    transaction that records the result. An unmeasured claim may be taken over
    once it expires or its session is no longer alive (see ``Database.claim_candidates``).
    """

    __tablename__ = "candidate_claim"

    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidate.id"), primary_key=True)
    target_id: Mapped[int] = mapped_column(ForeignKey("target.id"), primary_key=True, index=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("session.id"), index=True)
    claimed_at: Mapped[datetime] = mapped_column(DateTime)
    expires_at: Mapped[datetime] = mapped_column(DateTime)
    measured_at: Mapped[datetime | None] = mapped_column(DateTime)


class CostModelVersion(Base):
    """A serialized XGBoost booster trained for one target and feature version."""

    __tablename__ = "cost_model_version"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    target_id: Mapped[int] = mapped_column(ForeignKey("target.id"), index=True)
    feature_version: Mapped[str] = mapped_column(String(64))
    booster: Mapped[bytes] = mapped_column(LargeBinary)
    record_count: Mapped[int] = mapped_column(Integer)
    metrics: Mapped[str] = mapped_column(Text)  # JSON object
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow())


class GraphCandidate(Base):
    """An extracted program of a model and its end-to-end latencies (seconds)."""

    __tablename__ = "graph_candidate"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    graph_hash: Mapped[str] = mapped_column(HASH, unique=True)
    model_hash: Mapped[str] = mapped_column(HASH, index=True)
    term_text: Mapped[str] = mapped_column(Text)
    workload_hashes: Mapped[str] = mapped_column(Text)  # JSON list
    predicted_latency_s: Mapped[float | None] = mapped_column(Float)
    measured_latency_s: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow())


class ProgramTiming(Base):
    """An end-to-end timing of a reference program of a model on a target (append-only).

    ``program`` names the reference (``tvm_default``: TVM's untuned default build);
    ``times_s`` holds its repeat times, ``median_s`` their median (seconds).
    """

    __tablename__ = "program_timing"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_hash: Mapped[str] = mapped_column(HASH, index=True)
    target_id: Mapped[int] = mapped_column(ForeignKey("target.id"), index=True)
    program: Mapped[str] = mapped_column(String(32))
    session_id: Mapped[int | None] = mapped_column(ForeignKey("session.id"), index=True)
    times_s: Mapped[str] = mapped_column(Text)  # JSON list of repeat times, seconds
    median_s: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow())

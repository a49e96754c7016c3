"""The SQL tuning database: records in, records out.

Open it with :func:`open_database` (SQLite file by default, PostgreSQL for a
team); migrate with :func:`upgrade`. Only the records of
:mod:`database.records` cross this package's border, apart from two readers
and writers of whole tables imported by their own module (so that opening a
database never imports pandas): :func:`database.frames.read_frames` (the
tables as DataFrames, for the analysis) and :func:`database.bulk.bulk_insert`
(raw rows, for synthetic benchmark databases).
"""

from .connect import open_database
from .liveness import Heartbeat, stale_after_s
from .records import (
    DEFAULT_TRACE_JSON,
    CandidateRecord,
    GraphCandidateRecord,
    MeasureRecord,
    ProgramTimingRecord,
    TargetRecord,
    TrainingRow,
    WorkloadRecord,
    candidate_latency,
    canonical_json,
    sha256_text,
)
from .schema import upgrade
from .session import DatabaseError
from .status import (
    CONFIRM_FAILURES,
    END_STATUSES,
    MEASURE_STATUSES,
    SESSION_STATUSES,
    MeasureStatus,
    SessionStatus,
)
from .store import Database

__all__ = [
    "CONFIRM_FAILURES",
    "DEFAULT_TRACE_JSON",
    "END_STATUSES",
    "MEASURE_STATUSES",
    "SESSION_STATUSES",
    "CandidateRecord",
    "Database",
    "DatabaseError",
    "GraphCandidateRecord",
    "Heartbeat",
    "MeasureRecord",
    "MeasureStatus",
    "ProgramTimingRecord",
    "SessionStatus",
    "TargetRecord",
    "TrainingRow",
    "WorkloadRecord",
    "candidate_latency",
    "canonical_json",
    "open_database",
    "sha256_text",
    "stale_after_s",
    "upgrade",
]

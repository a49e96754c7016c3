"""The SQL tuning database: records in, records out.

Open it with :func:`open_database` (SQLite file by default, PostgreSQL for a
team); migrate with :func:`upgrade`. Only the records of
:mod:`database.records` cross this package's border.
"""

from .liveness import Heartbeat, stale_after_s
from .records import (
    DEFAULT_TRACE_JSON,
    MEASURE_STATUSES,
    CandidateRecord,
    GraphCandidateRecord,
    MeasureRecord,
    TargetRecord,
    TrainingRow,
    WorkloadRecord,
    candidate_latency,
    canonical_json,
    sha256_text,
)
from .schema import upgrade
from .session import DatabaseError, open_database
from .store import Database

__all__ = [
    "DEFAULT_TRACE_JSON",
    "MEASURE_STATUSES",
    "CandidateRecord",
    "Database",
    "DatabaseError",
    "GraphCandidateRecord",
    "Heartbeat",
    "MeasureRecord",
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

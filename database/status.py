"""The statuses a tuning database stores: of a measurement and of a tuning session.

Both are :class:`enum.StrEnum`: a member is the string the database column holds
(``MeasureStatus.OK == "ok"``), so rows written before these types existed read
back unchanged and JSON output stays the same.

They live in ``database/`` rather than ``measure/`` (which produces measurement
statuses) because the dependency only goes one way cheaply: ``measure/``
importing ``database`` loads SQLAlchemy, while ``database`` importing any
``measure/`` module would load TVM and set its runtime threads
(``measure/__init__``) for every ``tune db`` command.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "CONFIRM_FAILURES",
    "END_STATUSES",
    "MEASURE_STATUSES",
    "SESSION_STATUSES",
    "MeasureStatus",
    "SessionStatus",
]


class MeasureStatus(StrEnum):
    """How one measurement of a candidate ended (the ``measure_result.status`` column)."""

    #: Built, ran and matched the reference outputs; its repeat times are kept.
    OK = "ok"
    #: The build failed (a compile error, not a timeout).
    BUILD_ERROR = "build_error"
    #: The run failed on a live worker (not a wrong result, a timeout or a lost worker).
    RUN_ERROR = "run_error"
    #: The build or the run ran out of time.
    TIMEOUT = "timeout"
    #: The outputs differ from the reference outputs.
    WRONG_RESULT = "wrong_result"
    #: The worker died or its connection broke mid-measurement (or no worker answered).
    WORKER_LOST = "worker_lost"


class SessionStatus(StrEnum):
    """Where one ``tune`` invocation stands (the ``session.status`` column)."""

    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"
    FAILED = "failed"


#: Every measurement status, in the order above.
MEASURE_STATUSES: tuple[MeasureStatus, ...] = tuple(MeasureStatus)
#: Every session status, in the order above.
SESSION_STATUSES: tuple[SessionStatus, ...] = tuple(SessionStatus)
#: The statuses a session may end with.
END_STATUSES: tuple[SessionStatus, ...] = (SessionStatus.FINISHED, SessionStatus.INTERRUPTED, SessionStatus.FAILED)
#: Statuses of a re-measurement that rule its candidate out: it ran before and now fails or hangs.
CONFIRM_FAILURES: tuple[MeasureStatus, ...] = (
    MeasureStatus.BUILD_ERROR,
    MeasureStatus.RUN_ERROR,
    MeasureStatus.TIMEOUT,
    MeasureStatus.WRONG_RESULT,
)

"""Session liveness: a heartbeat thread, and the bound after which silence means death.

A running session stamps ``session.heartbeat_at`` (database time) every
``heartbeat_interval_s()`` seconds from a background thread, so a long build or
run does not make it look dead. A ``running`` session silent for longer than
``stale_after_s()`` is taken for dead (its process was killed or its machine
lost): the next run marks it ``interrupted`` and its candidate claims may be
taken over.

``TUNE_SESSION_STALE_S`` (seconds, default 120) sets the bound; the heartbeat
interval is a sixth of it, so five beats can be missed (a loaded machine, a
slow database) before a live session is taken for dead.
"""

from __future__ import annotations

import os
import threading

from .session import DatabaseError

STALE_ENV = "TUNE_SESSION_STALE_S"
DEFAULT_STALE_AFTER_S = 120.0
BEATS_PER_BOUND = 6


def stale_after_s() -> float:
    """Seconds of heartbeat silence after which a ``running`` session counts as dead.

    Raises
    ------
    DatabaseError
        When ``TUNE_SESSION_STALE_S`` is set but is not a positive number.
    """
    raw = os.environ.get(STALE_ENV, "").strip()
    if not raw:
        return DEFAULT_STALE_AFTER_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise DatabaseError(f"{STALE_ENV} must be a positive number of seconds, got {raw!r}")
    return value


def heartbeat_interval_s() -> float:
    """Seconds between two heartbeats of a running session."""
    return stale_after_s() / BEATS_PER_BOUND


class Heartbeat:
    """Context manager: a daemon thread that calls ``db.heartbeat(session_id)`` until exit.

    A failed beat (the database briefly unreachable) is retried at the next
    interval; the tuning itself notices a lasting outage on its next write.

    Parameters
    ----------
    db : database.Database
        The session's database (thread-safe, see :mod:`database.store`).
    session_id : int
        The session to keep alive.
    interval_s : float, optional
        Seconds between beats; :func:`heartbeat_interval_s` by default.
    """

    def __init__(self, db, session_id: int, interval_s: float | None = None) -> None:
        self.db, self.session_id = db, session_id
        self.interval_s = interval_s if interval_s is not None else heartbeat_interval_s()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{session_id}", daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.db.heartbeat(self.session_id)
            except DatabaseError:
                continue

    def __enter__(self) -> Heartbeat:
        self.db.heartbeat(self.session_id)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()

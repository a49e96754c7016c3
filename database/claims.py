"""Candidate claims: who measures which candidate on which target.

A tuner claims the candidates of a batch before building them and measures only
those it holds, so two tuners on one database never measure the same candidate
on the same target. A claim is one row per (candidate, target):

- taken with one ``INSERT ... ON CONFLICT (candidate_id, target_id) DO UPDATE
  ... WHERE <takeable>`` (PostgreSQL and SQLite both), so the check and the take
  are one atomic statement. On PostgreSQL a concurrent claimer of the same row
  waits on its row lock and then re-checks the condition on the committed row;
  on SQLite the write transaction (``BEGIN IMMEDIATE``) serialises claimers.
  Rows go in ascending key order, so two claimers of overlapping batches cannot
  deadlock.
- takeable when it is not yet measured and it is this session's own, or it has
  expired, or its session is no longer ``running``, or its session's heartbeat
  is older than the stale bound (a killed process).
- marked measured (``measured_at``) in the transaction that records the result,
  after which no one can take it again.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from .models import CandidateClaim, MeasureResult, TuningSession, utcnow
from .queries import chunks

# Claims of a session that still beats but hangs (a wedged build) age out after this.
CLAIM_TTL_S = 3600.0


def claim(
    conn: Connection,
    candidate_ids: list[int],
    target_id: int,
    session_id: int,
    *,
    ttl_s: float,
    stale_after_s: float,
) -> set[int]:
    """Claim candidates on a target for a session; returns the ids this session now holds.

    Candidates already measured on the target (by anyone, claimed or imported)
    and candidates held by another live session are left out.
    """
    if not candidate_ids:
        return set()
    now = conn.scalar(select(utcnow()))
    wanted = sorted(set(candidate_ids) - _measured(conn, candidate_ids, target_id))
    if not wanted:
        return set()
    dead = select(TuningSession.id).where(
        or_(
            TuningSession.status != "running",
            TuningSession.heartbeat_at < now - timedelta(seconds=stale_after_s),
        )
    )
    insert = sqlite.insert if conn.dialect.name == "sqlite" else postgresql.insert
    expires = now + timedelta(seconds=ttl_s)
    for part in chunks(wanted):
        stmt = insert(CandidateClaim).values(
            [
                {
                    "candidate_id": cid,
                    "target_id": target_id,
                    "session_id": session_id,
                    "claimed_at": now,
                    "expires_at": expires,
                }
                for cid in part
            ]
        )
        takeable = and_(
            CandidateClaim.measured_at.is_(None),
            or_(
                CandidateClaim.session_id == session_id,
                CandidateClaim.expires_at < now,
                CandidateClaim.session_id.in_(dead),
            ),
        )
        conn.execute(
            stmt.on_conflict_do_update(
                index_elements=["candidate_id", "target_id"],
                set_={
                    "session_id": stmt.excluded.session_id,
                    "claimed_at": stmt.excluded.claimed_at,
                    "expires_at": stmt.excluded.expires_at,
                },
                where=takeable,
            )
        )
    held: set[int] = set()
    for part in chunks(wanted):
        held.update(
            conn.scalars(
                select(CandidateClaim.candidate_id).where(
                    CandidateClaim.target_id == target_id,
                    CandidateClaim.session_id == session_id,
                    CandidateClaim.measured_at.is_(None),
                    CandidateClaim.candidate_id.in_(part),
                )
            )
        )
    return held


def open_claims(conn: Connection, session_id: int) -> int:
    """How many claims ``session_id`` holds on candidates it has not measured (any target)."""
    return conn.scalar(
        select(func.count()).select_from(CandidateClaim).where(
            CandidateClaim.session_id == session_id, CandidateClaim.measured_at.is_(None)
        )
    )


def mark_measured(conn: Connection, pairs: set[tuple[int, int]]) -> None:
    """Mark the claims on (candidate id, target id) pairs measured, whoever holds them."""
    now = conn.scalar(select(utcnow()))
    by_target: dict[int, list[int]] = {}
    for candidate_id, target_id in pairs:
        by_target.setdefault(target_id, []).append(candidate_id)
    for target_id, candidate_ids in by_target.items():
        for part in chunks(sorted(candidate_ids)):
            conn.execute(
                update(CandidateClaim)
                .where(
                    CandidateClaim.target_id == target_id,
                    CandidateClaim.candidate_id.in_(part),
                    CandidateClaim.measured_at.is_(None),
                )
                .values(measured_at=now)
            )


def _measured(conn: Connection, candidate_ids: list[int], target_id: int) -> set[int]:
    found: set[int] = set()
    for part in chunks(sorted(set(candidate_ids))):
        found.update(
            conn.scalars(
                select(MeasureResult.candidate_id)
                .where(MeasureResult.target_id == target_id, MeasureResult.candidate_id.in_(part))
                .distinct()
            )
        )
    return found

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

With a trial budget (``budget``, measurements per workload and target), the
check of the budget and the take are one transaction too: the claimer locks the
workload's row (PostgreSQL ``SELECT ... FOR NO KEY UPDATE``, which leaves the
foreign-key checks of inserts free; on SQLite ``BEGIN IMMEDIATE`` already
serialises writers), counts what the workload has taken on the target, and takes
at most what is left. What is taken (:func:`trials_taken`) is every candidate
with a trial measurement there (re-measurements of leaders, ``confirm``, are not
trials) plus every unmeasured claim still live (not expired, its session
running and beating); claims of dead sessions stop counting when they stop
being live, so they never hold a budget for longer than the stale bound or the
claim's TTL.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import and_, case, func, literal, or_, select, union, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from .models import Candidate, CandidateClaim, MeasureResult, TuningSession, Workload, utcnow
from .queries import chunks
from .status import SessionStatus

# Claims of a session that still beats but hangs (a wedged build) age out after this.
CLAIM_TTL_S = 3600.0

# What a row of _taken_rows says of its candidate.
_TRIAL, _HELD_ELSEWHERE, _HELD_HERE = 0, 1, 2


def claim(
    conn: Connection,
    candidate_ids: list[int],
    target_id: int,
    session_id: int,
    *,
    ttl_s: float,
    stale_after_s: float,
    budget: int | None = None,
) -> set[int]:
    """Claim candidates on a target for a session; returns the ids this session now holds.

    Candidates already measured on the target (by anyone, claimed or imported)
    and candidates held by another live session are left out. With ``budget``,
    each workload's share of ``candidate_ids`` not yet held by this session is
    cut, in the order given, to ``budget`` minus what the workload has taken on
    the target (this session's live claims included; those among
    ``candidate_ids`` are renewed), so no workload ends with more than
    ``budget`` trials however many sessions claim at once. Must run in a write
    transaction.
    """
    if not candidate_ids:
        return set()
    now = conn.scalar(select(utcnow()))
    measured = _measured(conn, candidate_ids, target_id)
    wanted = [c for c in dict.fromkeys(candidate_ids) if c not in measured]
    if not wanted:
        return set()
    dead = _dead_sessions(now, stale_after_s)
    if budget is not None:
        wanted = _within_budget(conn, wanted, target_id, session_id, budget, now, dead)
    wanted = sorted(wanted)
    if not wanted:
        return set()
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


def trials_taken(conn: Connection, workload_id: int, target_id: int, *, stale_after_s: float) -> int:
    """How much of a workload's budget on a target is taken: candidates with a trial there plus live claims."""
    now = conn.scalar(select(utcnow()))
    return len({cid for cid, _ in _taken_rows(conn, workload_id, target_id, None, now,
                                              _dead_sessions(now, stale_after_s))})


def _dead_sessions(now, stale_after_s: float):
    """Ids of sessions whose claims anyone may take: ended, or silent for longer than the stale bound."""
    return select(TuningSession.id).where(
        or_(
            TuningSession.status != SessionStatus.RUNNING,
            TuningSession.heartbeat_at < now - timedelta(seconds=stale_after_s),
        )
    )


def _within_budget(conn: Connection, wanted: list[int], target_id: int, session_id: int, budget: int,
                   now, dead) -> list[int]:
    """The candidates of ``wanted`` (in order) that fit their workload's budget, each workload locked first."""
    workload_of = {}
    for part in chunks(sorted(wanted)):
        rows = conn.execute(select(Candidate.id, Candidate.workload_id).where(Candidate.id.in_(part)))
        workload_of.update((cid, wid) for cid, wid in rows)
    granted: set[int] = set()
    for workload_id in sorted(set(workload_of.values())):  # one lock order for every claimer
        conn.execute(select(Workload.id).where(Workload.id == workload_id).with_for_update(key_share=True))
        rows = _taken_rows(conn, workload_id, target_id, session_id, now, dead)
        taken = {cid for cid, _ in rows}
        held_here = {cid for cid, kind in rows if kind == _HELD_HERE}
        free = [c for c in wanted if workload_of[c] == workload_id and c not in taken]
        granted.update(c for c in wanted if c in held_here)  # renewed: already within the budget
        granted.update(free[: max(budget - len(taken), 0)])
    return [c for c in wanted if c in granted]


def _taken_rows(conn: Connection, workload_id: int, target_id: int, session_id: int | None, now, dead
                ) -> list[tuple[int, int]]:
    """(candidate id, kind) for what a workload has taken on a target, read in one statement (one snapshot,
    so a result recorded meanwhile counts once, as a claim or as a trial): kind ``_TRIAL`` for a trial
    measurement, ``_HELD_HERE`` for a live unmeasured claim of ``session_id``, ``_HELD_ELSEWHERE`` for
    another's."""
    trials = (
        select(MeasureResult.candidate_id, literal(_TRIAL))
        .join(Candidate, Candidate.id == MeasureResult.candidate_id)
        .where(Candidate.workload_id == workload_id, MeasureResult.target_id == target_id, ~MeasureResult.confirm)
    )
    here = CandidateClaim.session_id == session_id if session_id is not None else literal(False)
    live = (
        select(CandidateClaim.candidate_id,
               case((here, literal(_HELD_HERE)), else_=literal(_HELD_ELSEWHERE)))
        .join(Candidate, Candidate.id == CandidateClaim.candidate_id)
        .where(
            Candidate.workload_id == workload_id,
            CandidateClaim.target_id == target_id,
            CandidateClaim.measured_at.is_(None),
            CandidateClaim.expires_at >= now,
            CandidateClaim.session_id.not_in(dead),
        )
    )
    return [(cid, kind) for cid, kind in conn.execute(union(trials, live))]


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

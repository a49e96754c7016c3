"""Read queries over measurements: resume, best-so-far and training sets.

Every query is scoped to one target (a target JSON plus a device key): a
measurement taken on one target never answers a question about another.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable

from sqlalchemy import Select, and_, exists, func, or_, select
from sqlalchemy.engine import Connection
from sqlalchemy.orm import aliased

from .models import Candidate, CostModelVersion, MeasureResult, Target, TuningSession, Workload
from .records import CandidateRecord, MeasureRecord, TargetRecord, TrainingRow, candidate_latency
from .status import CONFIRM_FAILURES, MeasureStatus

_IN_CHUNK = 500  # bound parameters per IN list, well under every backend's limit


def chunks(items: list, size: int = _IN_CHUNK) -> Iterable[list]:
    """Consecutive slices of ``items`` of at most ``size`` elements."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def ids_by_hash(conn: Connection, hash_column, hashes: Iterable[str]) -> dict[str, int]:
    """Map each known hash of ``hash_column`` (e.g. ``Workload.workload_hash``) to its row id."""
    id_column = hash_column.class_.id
    found: dict[str, int] = {}
    for part in chunks(sorted(set(hashes))):
        rows = conn.execute(select(hash_column, id_column).where(hash_column.in_(part)))
        found.update(dict(rows.all()))
    return found


def target_id(conn: Connection, target_hash: str) -> int | None:
    """The row id of a target hash, or None when it is unknown."""
    return conn.scalar(select(Target.id).where(Target.target_hash == target_hash))


def _latest_ids(target: int, *, workload_ids: list[int] | None) -> Select:
    """Ids of the newest trial (any status; re-measurements left out) per candidate on a target."""
    query = select(func.max(MeasureResult.id)).where(MeasureResult.target_id == target, ~MeasureResult.confirm)
    if workload_ids is not None:
        query = query.join(Candidate, Candidate.id == MeasureResult.candidate_id).where(
            Candidate.workload_id.in_(workload_ids)
        )
    return query.group_by(MeasureResult.candidate_id)


def _never_failed():
    """Where-clause: the row's candidate never gave a ``wrong_result`` on the row's target, and
    no re-measurement of it there (``confirm``) failed with one of :data:`CONFIRM_FAILURES`.

    Correlated, so each row costs one probe of the (target, candidate) index
    instead of a scan of every failure on the target.
    """
    other = aliased(MeasureResult)
    return ~exists(select(other.id).where(
        other.candidate_id == MeasureResult.candidate_id,
        other.target_id == MeasureResult.target_id,
        or_(other.status == MeasureStatus.WRONG_RESULT, and_(other.confirm, other.status.in_(CONFIRM_FAILURES))),
    ))


def _ok(target: int):
    """Where-clauses of the measurements that count as a candidate's time on a target."""
    return (MeasureResult.target_id == target, MeasureResult.status == MeasureStatus.OK,
            MeasureResult.median_s.is_not(None), _never_failed())


def measured_candidates(
    conn: Connection, workload_hash: str, target_hash: str
) -> dict[str, MeasureRecord]:
    """The newest trial (any status; re-measurements of leaders left out) per candidate of a workload on a target."""
    target = target_id(conn, target_hash)
    workload = conn.scalar(select(Workload.id).where(Workload.workload_hash == workload_hash))
    if target is None or workload is None:
        return {}
    latest = _latest_ids(target, workload_ids=[workload])
    rows = conn.execute(
        select(
            Candidate.candidate_hash,
            MeasureResult.status,
            MeasureResult.times_s,
            MeasureResult.build_time_s,
            MeasureResult.error,
            MeasureResult.worker,
            MeasureResult.session_id,
            MeasureResult.confirm,
        )
        .join(Candidate, Candidate.id == MeasureResult.candidate_id)
        .where(MeasureResult.id.in_(latest))
    )
    return {
        m.candidate_hash: MeasureRecord(
            candidate_hash=m.candidate_hash,
            workload_hash=workload_hash,
            target_hash=target_hash,
            status=m.status,
            times_s=tuple(json.loads(m.times_s)),
            build_time_s=m.build_time_s,
            error=m.error,
            worker=m.worker,
            session_id=m.session_id,
            confirm=bool(m.confirm),
        )
        for m in rows
    }


def candidate_latencies(
    conn: Connection, workload_hash: str, target_hash: str, limit: int | None = None
) -> list[TrainingRow]:
    """The candidates of a workload that count on a target, fastest first, at most ``limit``.

    A candidate counts when it has an ``ok`` measurement on the target, never
    gave a ``wrong_result`` there, and no re-measurement of it failed (see
    :func:`_never_failed`); its latency is :func:`candidate_latency` over
    its ``ok`` measurements, and ``measurements`` says how many there are. Ties
    go to the candidate recorded first.
    """
    target = target_id(conn, target_hash)
    workload = conn.scalar(select(Workload.id).where(Workload.workload_hash == workload_hash))
    if target is None or workload is None:
        return []
    medians: dict[int, list[float]] = {}
    rows = conn.execute(
        select(MeasureResult.candidate_id, MeasureResult.median_s)
        .join(Candidate, Candidate.id == MeasureResult.candidate_id)
        .where(Candidate.workload_id == workload, *_ok(target))
    )
    for cid, median in rows:
        medians.setdefault(cid, []).append(median)
    order = sorted((candidate_latency(m), cid) for cid, m in medians.items())[:limit]
    info = {}
    for part in chunks([cid for _, cid in order]):
        info.update((r.id, r) for r in conn.execute(
            select(Candidate.id, Candidate.candidate_hash, Candidate.trace_json).where(Candidate.id.in_(part))))
    return [TrainingRow(workload_hash, info[cid].candidate_hash, info[cid].trace_json, latency, len(medians[cid]))
            for latency, cid in order]


def candidate_traces(conn: Connection, workload_hash: str, candidate_hashes: list[str]) -> dict[str, str]:
    """Trace JSON of each of ``candidate_hashes`` that is a recorded candidate of the workload."""
    out: dict[str, str] = {}
    for part in chunks(sorted(set(candidate_hashes))):
        rows = conn.execute(
            select(Candidate.candidate_hash, Candidate.trace_json)
            .join(Workload, Workload.id == Candidate.workload_id)
            .where(Workload.workload_hash == workload_hash, Candidate.candidate_hash.in_(part)))
        out.update((candidate_hash, trace) for candidate_hash, trace in rows)
    return out


def best(
    conn: Connection, workload_hash: str, target_hash: str
) -> tuple[CandidateRecord, float] | None:
    """The candidate of a workload with the least latency on a target (see :func:`candidate_latencies`)."""
    fastest = candidate_latencies(conn, workload_hash, target_hash, limit=1)
    if not fastest:
        return None
    return CandidateRecord(workload_hash=workload_hash, trace_json=fastest[0].trace_json), fastest[0].median_s


def training_rows(
    conn: Connection, target_hash: str, workload_hashes: list[str] | None = None
) -> list[TrainingRow]:
    """Per candidate that counts on a target (see :func:`candidate_latencies`), its latency; by workload, candidate."""
    target = target_id(conn, target_hash)
    if target is None:
        return []
    query = (
        select(Workload.workload_hash, Candidate.candidate_hash, Candidate.trace_json, MeasureResult.median_s)
        .join(Candidate, Candidate.id == MeasureResult.candidate_id)
        .join(Workload, Workload.id == Candidate.workload_id)
        .where(*_ok(target))
        .order_by(Workload.workload_hash, Candidate.candidate_hash, MeasureResult.id)
    )
    if workload_hashes is not None:
        workload_ids = list(ids_by_hash(conn, Workload.workload_hash, workload_hashes).values())
        if not workload_ids:
            return []
        query = query.where(Candidate.workload_id.in_(workload_ids))
    out: list[TrainingRow] = []
    for (wh, ch, trace), rows in itertools.groupby(conn.execute(query), key=lambda r: r[:3]):
        medians = [r.median_s for r in rows]
        out.append(TrainingRow(wh, ch, trace, candidate_latency(medians), len(medians)))
    return out


# -- cost model versions and replay (queries of the cost model's tools) --------


def targets(conn: Connection) -> list[TargetRecord]:
    """Every target (target JSON and device key), oldest first."""
    rows = conn.execute(select(Target.target_json, Target.key).order_by(Target.id))
    return [TargetRecord(target_json=r.target_json, key=r.key) for r in rows]


def cost_model_versions(conn: Connection, target_hash: str | None = None) -> list[dict]:
    """Stored cost model versions (without their boosters), newest first, for one target or all."""
    query = (
        select(CostModelVersion.id, Target.target_hash, CostModelVersion.feature_version,
               CostModelVersion.record_count, CostModelVersion.metrics, CostModelVersion.created_at)
        .join(Target, Target.id == CostModelVersion.target_id)
        .order_by(CostModelVersion.id.desc())
    )
    if target_hash is not None:
        query = query.where(Target.target_hash == target_hash)
    return [
        {"id": r.id, "target_hash": r.target_hash, "feature_version": r.feature_version,
         "record_count": r.record_count, "metrics": json.loads(r.metrics),
         "created_at": r.created_at.isoformat() if r.created_at else None}
        for r in conn.execute(query)
    ]


def cost_model_booster(conn: Connection, version_id: int) -> tuple[bytes, str, str] | None:
    """Booster bytes, target hash and feature version of one stored version, or None."""
    row = conn.execute(
        select(CostModelVersion.booster, Target.target_hash, CostModelVersion.feature_version)
        .join(Target, Target.id == CostModelVersion.target_id)
        .where(CostModelVersion.id == version_id)
    ).first()
    return None if row is None else (bytes(row.booster), row.target_hash, row.feature_version)


def ok_span(conn: Connection, target_hash: str) -> tuple[str, str] | None:
    """ISO times of the first and last ``ok`` measurement on a target, or None."""
    target = target_id(conn, target_hash)
    if target is None:
        return None
    row = conn.execute(
        select(func.min(MeasureResult.created_at), func.max(MeasureResult.created_at))
        .where(MeasureResult.target_id == target, MeasureResult.status == MeasureStatus.OK)
    ).first()
    if row is None or row[0] is None:
        return None
    return row[0].isoformat(), row[1].isoformat()


def measure_log(conn: Connection, target_hash: str) -> list[tuple[str, str, str, str, float | None, int]]:
    """Every measurement on a target in the order taken:
    (workload hash, candidate hash, trace JSON, status, median s, id)."""
    target = target_id(conn, target_hash)
    if target is None:
        return []
    rows = conn.execute(
        select(Workload.workload_hash, Candidate.candidate_hash, Candidate.trace_json, MeasureResult.status,
               MeasureResult.median_s, MeasureResult.id)
        .join(Candidate, Candidate.id == MeasureResult.candidate_id)
        .join(Workload, Workload.id == Candidate.workload_id)
        .where(MeasureResult.target_id == target)
        .order_by(MeasureResult.id)
    )
    return [tuple(r) for r in rows]


def measurement_keys(conn: Connection, pairs: list[tuple[str, str]]) -> set[tuple[str, str, str, str]]:
    """(candidate hash, target hash, status, times JSON) of the measurements of these pairs."""
    found: set[tuple[str, str, str, str]] = set()
    wanted = set(pairs)
    for part in chunks(sorted({c for c, _ in wanted})):
        rows = conn.execute(
            select(Candidate.candidate_hash, Target.target_hash, MeasureResult.status, MeasureResult.times_s)
            .join(Candidate, Candidate.id == MeasureResult.candidate_id)
            .join(Target, Target.id == MeasureResult.target_id)
            .where(Candidate.candidate_hash.in_(part))
        )
        found.update((c, t, s, json.dumps(json.loads(times))) for c, t, s, times in rows if (c, t) in wanted)
    return found


def all_measurements(conn: Connection, target_hash: str) -> list[tuple[MeasureRecord, str]]:
    """Every measurement on a target with its candidate's trace JSON, oldest first."""
    rows = conn.execute(
        select(Candidate.trace_json, Candidate.candidate_hash, Workload.workload_hash, MeasureResult.status,
               MeasureResult.times_s, MeasureResult.build_time_s, MeasureResult.error, MeasureResult.worker,
               MeasureResult.session_id, MeasureResult.confirm)
        .join(Candidate, Candidate.id == MeasureResult.candidate_id)
        .join(Workload, Workload.id == Candidate.workload_id)
        .join(Target, Target.id == MeasureResult.target_id)
        .where(Target.target_hash == target_hash)
        .order_by(MeasureResult.id)
    )
    return [
        (MeasureRecord(candidate_hash=c, workload_hash=w, target_hash=target_hash, status=s,
                       times_s=tuple(json.loads(t)), build_time_s=b, error=e, worker=k, session_id=sid,
                       confirm=bool(confirm)), trace)
        for trace, c, w, s, t, b, e, k, sid, confirm in rows
    ]


def sessions(conn: Connection) -> list[dict]:
    """Every tuning session, oldest first: id, args (dict; {} when unreadable), model_source, model_hash,
    code_version, status and started_at (ISO)."""
    out = []
    for r in conn.execute(select(TuningSession.id, TuningSession.args, TuningSession.model_source,
                                 TuningSession.model_hash, TuningSession.code_version, TuningSession.status,
                                 TuningSession.started_at).order_by(TuningSession.id)):
        try:
            args = json.loads(r.args)
        except (TypeError, ValueError):
            args = {}
        out.append({"id": r.id, "args": args if isinstance(args, dict) else {}, "model_source": r.model_source,
                    "model_hash": r.model_hash, "code_version": r.code_version, "status": r.status,
                    "started_at": r.started_at.isoformat() if r.started_at else None})
    return out

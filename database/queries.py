"""Read queries over measurements: resume, best-so-far and training sets.

Every query is scoped to one target (a target JSON plus a device key): a
measurement taken on one target never answers a question about another.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from sqlalchemy import Select, exists, func, select
from sqlalchemy.engine import Connection
from sqlalchemy.orm import aliased

from .models import Candidate, CostModelVersion, MeasureResult, Target, Workload
from .records import CandidateRecord, MeasureRecord, TargetRecord, TrainingRow

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
        found.update({h: i for h, i in rows})
    return found


def target_id(conn: Connection, target_hash: str) -> int | None:
    """The row id of a target hash, or None when it is unknown."""
    return conn.scalar(select(Target.id).where(Target.target_hash == target_hash))


def _latest_ids(target: int, *, ok_only: bool, workload_ids: list[int] | None) -> Select:
    """Ids of the newest measurement per candidate on a target.

    With ``ok_only``, only ``ok`` rows count and a candidate that ever gave a
    ``wrong_result`` on this target is left out entirely.
    """
    query = select(func.max(MeasureResult.id)).where(MeasureResult.target_id == target)
    if workload_ids is not None:
        query = query.join(Candidate, Candidate.id == MeasureResult.candidate_id).where(
            Candidate.workload_id.in_(workload_ids)
        )
    if ok_only:
        # Correlated, so each candidate costs one probe of the (target, candidate)
        # index instead of a scan of every wrong result on the target.
        other = aliased(MeasureResult)
        wrong = select(other.id).where(
            other.candidate_id == MeasureResult.candidate_id,
            other.target_id == target,
            other.status == "wrong_result",
        )
        query = query.where(MeasureResult.status == "ok", ~exists(wrong))
    return query.group_by(MeasureResult.candidate_id)


def measured_candidates(
    conn: Connection, workload_hash: str, target_hash: str
) -> dict[str, MeasureRecord]:
    """The newest measurement (any status) per candidate of a workload on a target."""
    target = target_id(conn, target_hash)
    workload = conn.scalar(select(Workload.id).where(Workload.workload_hash == workload_hash))
    if target is None or workload is None:
        return {}
    latest = _latest_ids(target, ok_only=False, workload_ids=[workload])
    rows = conn.execute(
        select(
            Candidate.candidate_hash,
            MeasureResult.status,
            MeasureResult.times_s,
            MeasureResult.build_time_s,
            MeasureResult.error,
            MeasureResult.worker,
            MeasureResult.session_id,
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
        )
        for m in rows
    }


def best(
    conn: Connection, workload_hash: str, target_hash: str
) -> tuple[CandidateRecord, float] | None:
    """The candidate of a workload with the least newest ``ok`` median on a target."""
    target = target_id(conn, target_hash)
    workload = conn.scalar(select(Workload.id).where(Workload.workload_hash == workload_hash))
    if target is None or workload is None:
        return None
    latest = _latest_ids(target, ok_only=True, workload_ids=[workload])
    row = conn.execute(
        select(Candidate.trace_json, MeasureResult.median_s)
        .join(Candidate, Candidate.id == MeasureResult.candidate_id)
        .where(MeasureResult.id.in_(latest), MeasureResult.median_s.is_not(None))
        .order_by(MeasureResult.median_s, MeasureResult.id)
        .limit(1)
    ).first()
    if row is None:
        return None
    return CandidateRecord(workload_hash=workload_hash, trace_json=row.trace_json), row.median_s


def training_rows(
    conn: Connection, target_hash: str, workload_hashes: list[str] | None = None
) -> list[TrainingRow]:
    """Newest ``ok`` median per candidate on a target, ordered by workload then candidate."""
    target = target_id(conn, target_hash)
    if target is None:
        return []
    workload_ids = None
    if workload_hashes is not None:
        workload_ids = list(ids_by_hash(conn, Workload.workload_hash, workload_hashes).values())
        if not workload_ids:
            return []
    latest = _latest_ids(target, ok_only=True, workload_ids=workload_ids)
    rows = conn.execute(
        select(
            Workload.workload_hash,
            Candidate.candidate_hash,
            Candidate.trace_json,
            MeasureResult.median_s,
        )
        .join(Candidate, Candidate.id == MeasureResult.candidate_id)
        .join(Workload, Workload.id == Candidate.workload_id)
        .where(MeasureResult.id.in_(latest), MeasureResult.median_s.is_not(None))
        .order_by(Workload.workload_hash, Candidate.candidate_hash)
    )
    return [TrainingRow(*row) for row in rows]


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
        .where(MeasureResult.target_id == target, MeasureResult.status == "ok")
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
        select(Candidate.trace_json, Candidate.candidate_hash, Workload.workload_hash, MeasureResult.status, MeasureResult.times_s,
               MeasureResult.build_time_s, MeasureResult.error, MeasureResult.worker, MeasureResult.session_id)
        .join(Candidate, Candidate.id == MeasureResult.candidate_id)
        .join(Workload, Workload.id == Candidate.workload_id)
        .join(Target, Target.id == MeasureResult.target_id)
        .where(Target.target_hash == target_hash)
        .order_by(MeasureResult.id)
    )
    return [
        (MeasureRecord(candidate_hash=c, workload_hash=w, target_hash=target_hash, status=s,
                       times_s=tuple(json.loads(t)), build_time_s=b, error=e, worker=k, session_id=sid), trace)
        for trace, c, w, s, t, b, e, k, sid in rows
    ]

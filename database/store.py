"""The tuning database: the one object other packages talk to.

Contract
--------
- Rows keyed by a hash (targets, workloads, candidates, graph candidates) are
  inserted with ``INSERT ... ON CONFLICT DO NOTHING``: adding the same record
  twice, from any number of processes, leaves one row and never raises. The
  first writer's content wins; a hash stands for its content.
- Measurements are append-only: every call adds rows, nothing updates or
  deletes them. Each batch is one transaction (all rows or none).
- Every query takes a target hash; results measured on one target never answer
  for another.
- Methods are safe to call from several threads (each call takes its own pooled
  connection and transaction). A child process must open its own ``Database``.
- Every failure raises :class:`~database.session.DatabaseError`.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from dataclasses import fields
from datetime import timedelta
from importlib import metadata

from sqlalchemy import Engine, func, select, update
from sqlalchemy.dialects import postgresql, sqlite

from . import claims, queries
from .liveness import stale_after_s
from .models import (
    Base,
    Candidate,
    CostModelVersion,
    GraphCandidate,
    MeasureResult,
    ProgramTiming,
    Target,
    TuningSession,
    Workload,
    utcnow,
)
from .recorded import RecordedModel, recorded_models
from .records import (
    CandidateRecord,
    GraphCandidateRecord,
    MeasureRecord,
    ProgramTimingRecord,
    TargetRecord,
    TrainingRow,
    WorkloadRecord,
    canonical_json,
)
from .session import DatabaseError, display_url, transaction
from .status import END_STATUSES, SessionStatus

_WORKLOAD_FIELDS = [f.name for f in fields(WorkloadRecord)]


def _code_version() -> str:
    try:
        return metadata.version("tune")
    except metadata.PackageNotFoundError:
        return "unknown"


def _insert_ignore(conn, model, key: str, rows: list[dict]) -> None:
    """Insert rows, skipping those whose unique ``key`` already exists."""
    if not rows:
        return
    insert = sqlite.insert if conn.dialect.name == "sqlite" else postgresql.insert
    unique = list({row[key]: row for row in rows}.values())
    conn.execute(insert(model).on_conflict_do_nothing(index_elements=[key]), unique)


def _require_ids(conn, hash_column, hashes: list[str], what: str, hint: str) -> dict[str, int]:
    found = queries.ids_by_hash(conn, hash_column, hashes)
    missing = sorted(set(hashes) - found.keys())
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise DatabaseError(f"unknown {what} {missing[0]}{more}: {hint} first")
    return found


def measure_stats(times_s: tuple[float, ...]) -> dict[str, float | None]:
    """Median, mean, min and sample standard deviation of repeat times (seconds).

    All are None when there are no times; the deviation is 0 for a single time.
    """
    if not times_s:
        return {"median_s": None, "mean_s": None, "min_s": None, "stdev_s": None}
    return {
        "median_s": statistics.median(times_s),
        "mean_s": statistics.fmean(times_s),
        "min_s": min(times_s),
        "stdev_s": statistics.stdev(times_s) if len(times_s) > 1 else 0.0,
    }


class Database:
    """A tuning database opened by :func:`database.open_database`.

    Parameters
    ----------
    engine : sqlalchemy.Engine
        An engine whose schema has been checked; the ``Database`` owns it.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    @property
    def url_display(self) -> str:
        """The database URL with its password hidden."""
        return display_url(self._engine.url)

    def __repr__(self) -> str:
        return f"Database({self.url_display!r})"

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Close every pooled connection."""
        self._engine.dispose()

    # -- sessions ---------------------------------------------------------

    def start_session(
        self, args: dict, model_source: str, model_hash: str, *, code_version: str | None = None
    ) -> int:
        """Record the start of a ``tune`` invocation and return its session id.

        Parameters
        ----------
        args : dict
            The invocation's arguments (stored as JSON; other values as ``str``).
        model_source : str
            Where the model came from (a Hugging Face name, a file path).
        model_hash : str
            The model's hash.
        code_version : str, optional
            Defaults to the installed ``tune`` package version.
        """
        args_json = json.dumps(args, sort_keys=True, default=str)
        with transaction(self._engine) as conn:
            result = conn.execute(
                TuningSession.__table__.insert().values(
                    args=args_json,
                    model_source=model_source,
                    model_hash=model_hash,
                    code_version=code_version or _code_version(),
                    status=SessionStatus.RUNNING,
                )
            )
            return int(result.inserted_primary_key[0])

    def heartbeat(self, session_id: int) -> None:
        """Stamp a session as alive now (database time)."""
        self._update_session(session_id, heartbeat_at=utcnow())

    def finish_session(self, session_id: int, status: SessionStatus = SessionStatus.FINISHED) -> int:
        """End a session with ``status``: ``finished``, ``interrupted`` or ``failed``.

        Its string is accepted too. ``ValueError`` for any other status (``running`` included).
        Returns how many of its claims it released: candidates it claimed and did not
        measure, which any other session may now take.
        """
        if status not in END_STATUSES:
            raise ValueError(f"session status must be one of {tuple(map(str, END_STATUSES))}, not {status!r}")
        self._update_session(session_id, status=status, ended_at=utcnow(), heartbeat_at=utcnow())
        with transaction(self._engine, write=False) as conn:
            return claims.open_claims(conn, session_id)

    def _update_session(self, session_id: int, **values) -> None:
        with transaction(self._engine) as conn:
            result = conn.execute(
                update(TuningSession).where(TuningSession.id == session_id).values(**values)
            )
            if result.rowcount == 0:
                raise DatabaseError(f"no tuning session with id {session_id}")

    def mark_stale_sessions_interrupted(self, older_than_s: float) -> int:
        """Mark ``running`` sessions silent for over ``older_than_s`` seconds as interrupted.

        Their end time is their last heartbeat. Returns how many were marked.
        """
        with transaction(self._engine) as conn:
            cutoff = conn.scalar(select(utcnow())) - timedelta(seconds=older_than_s)
            result = conn.execute(
                update(TuningSession)
                .where(TuningSession.status == SessionStatus.RUNNING, TuningSession.heartbeat_at < cutoff)
                .values(status=SessionStatus.INTERRUPTED, ended_at=TuningSession.heartbeat_at)
            )
            return result.rowcount

    def sessions(self) -> list[dict]:
        """Every tuning session, oldest first (see :func:`database.queries.sessions` for the keys)."""
        with transaction(self._engine, write=False) as conn:
            return queries.sessions(conn)

    def session_trials(self, session_id: int, confirm: bool = False) -> int:
        """The number of measurements (any status) recorded by a session: its trials, or with ``confirm``
        its re-measurements of leaders (see ``MeasureRecord.confirm``)."""
        with transaction(self._engine, write=False) as conn:
            return conn.scalar(
                select(func.count())
                .select_from(MeasureResult)
                .where(MeasureResult.session_id == session_id, MeasureResult.confirm == confirm)
            )

    # -- keyed records ----------------------------------------------------

    def add_target(self, target: TargetRecord) -> None:
        """Add a target (idempotent by its hash)."""
        row = {"target_hash": target.target_hash, "target_json": target.target_json, "key": target.key}
        with transaction(self._engine) as conn:
            _insert_ignore(conn, Target, "target_hash", [row])

    def add_workload(self, workload: WorkloadRecord) -> None:
        """Add a workload (idempotent by its hash)."""
        row = {
            "workload_hash": workload.workload_hash,
            "name": workload.name,
            "op_kind": workload.op_kind,
            "script": workload.script,
            "shapes_json": workload.shapes_json,
            "flops": float(workload.flops),
            "bytes_moved": float(workload.bytes_moved),
        }
        with transaction(self._engine) as conn:
            _insert_ignore(conn, Workload, "workload_hash", [row])

    def get_workload(self, workload_hash: str) -> WorkloadRecord | None:
        """The workload with this hash, or None."""
        with transaction(self._engine, write=False) as conn:
            row = conn.execute(
                select(*(getattr(Workload, name) for name in _WORKLOAD_FIELDS)).where(
                    Workload.workload_hash == workload_hash
                )
            ).first()
        return None if row is None else WorkloadRecord(*row)

    def add_candidates(self, candidates: list[CandidateRecord]) -> None:
        """Add schedule candidates in one transaction (idempotent by hash).

        Raises
        ------
        DatabaseError
            When a candidate's workload has not been added.
        """
        if not candidates:
            return
        with transaction(self._engine) as conn:
            workload_ids = _require_ids(
                conn,
                Workload.workload_hash,
                [c.workload_hash for c in candidates],
                "workload",
                "add_workload",
            )
            rows = [
                {
                    "candidate_hash": c.candidate_hash,
                    "workload_id": workload_ids[c.workload_hash],
                    "trace_json": c.trace_json,
                }
                for c in candidates
            ]
            _insert_ignore(conn, Candidate, "candidate_hash", rows)

    # -- measurements -----------------------------------------------------

    def add_measure_results(self, results: list[MeasureRecord]) -> None:
        """Append measurements in one transaction; statistics come from ``times_s``.

        Raises
        ------
        DatabaseError
            When a candidate, target or session is unknown, or a record's
            workload hash disagrees with its candidate's.
        """
        if not results:
            return
        with transaction(self._engine) as conn:
            self._insert_measurements(conn, results)

    def _insert_measurements(self, conn, results: list[MeasureRecord]) -> int:
        candidate_ids = _require_ids(
            conn,
            Candidate.candidate_hash,
            [r.candidate_hash for r in results],
            "candidate",
            "add_candidates",
        )
        target_ids = _require_ids(
            conn, Target.target_hash, [r.target_hash for r in results], "target", "add_target"
        )
        self._check_workloads(conn, results)
        rows = [
            {
                "candidate_id": candidate_ids[r.candidate_hash],
                "target_id": target_ids[r.target_hash],
                "session_id": r.session_id,
                "status": r.status,
                "times_s": json.dumps([float(t) for t in r.times_s]),
                **measure_stats(r.times_s),
                "build_time_s": float(r.build_time_s),
                "error": r.error,
                "worker": r.worker,
                "confirm": r.confirm,
            }
            for r in results
        ]
        if rows:
            conn.execute(MeasureResult.__table__.insert(), rows)
            claims.mark_measured(conn, {(row["candidate_id"], row["target_id"]) for row in rows})
        return len(rows)

    def import_records(
        self,
        targets: list[TargetRecord],
        workloads: list[WorkloadRecord],
        candidates: list[CandidateRecord],
        results: list[MeasureRecord],
    ) -> dict[str, int]:
        """Add records from another tool in one transaction: all of them or none.

        Keyed records are idempotent as in :meth:`add_target` and friends. A
        measurement is skipped when the database already holds one of the same
        candidate on the same target with the same status and repeat times, so
        importing the same records twice adds nothing.

        Returns
        -------
        dict
            ``{"measure_results": added, "skipped": already present}``.
        """
        with transaction(self._engine) as conn:
            _insert_ignore(conn, Target, "target_hash", [
                {"target_hash": t.target_hash, "target_json": t.target_json, "key": t.key} for t in targets])
            _insert_ignore(conn, Workload, "workload_hash", [
                {name: getattr(w, name) for name in _WORKLOAD_FIELDS} for w in workloads])
            if candidates:
                workload_ids = _require_ids(conn, Workload.workload_hash, [c.workload_hash for c in candidates],
                                            "workload", "add_workload")
                _insert_ignore(conn, Candidate, "candidate_hash", [
                    {"candidate_hash": c.candidate_hash, "workload_id": workload_ids[c.workload_hash],
                     "trace_json": c.trace_json} for c in candidates])
            present = queries.measurement_keys(conn, [(r.candidate_hash, r.target_hash) for r in results])
            fresh, seen = [], set(present)
            for r in results:
                key = (r.candidate_hash, r.target_hash, r.status, json.dumps([float(t) for t in r.times_s]))
                if key not in seen:
                    seen.add(key)
                    fresh.append(r)
            added = self._insert_measurements(conn, fresh)
        return {"measure_results": added, "skipped": len(results) - added}

    def measure_results(self, target_hash: str) -> list[tuple[MeasureRecord, str]]:
        """Every measurement on a target with its candidate's trace JSON, oldest first (for export)."""
        with transaction(self._engine, write=False) as conn:
            return queries.all_measurements(conn, target_hash)

    @staticmethod
    def _check_workloads(conn, results: list[MeasureRecord]) -> None:
        expected = {r.candidate_hash: r.workload_hash for r in results}
        for part in queries.chunks(sorted(expected)):
            rows = conn.execute(
                select(Candidate.candidate_hash, Workload.workload_hash)
                .join(Workload, Workload.id == Candidate.workload_id)
                .where(Candidate.candidate_hash.in_(part))
            )
            for candidate_hash, workload_hash in rows:
                if expected[candidate_hash] != workload_hash:
                    raise DatabaseError(
                        f"measurement of candidate {candidate_hash} names workload "
                        f"{expected[candidate_hash]}, but the candidate belongs to {workload_hash}"
                    )

    def claim_candidates(
        self,
        candidate_hashes: list[str],
        target_hash: str,
        session_id: int,
        *,
        ttl_s: float = claims.CLAIM_TTL_S,
        trials: int | None = None,
    ) -> set[str]:
        """Claim candidates on a target before measuring them (one transaction).

        A candidate is left out when it has a measurement on this target already,
        or when another session holds an unexpired claim on it and that session
        is ``running`` with a heartbeat newer than the stale bound
        (:func:`database.liveness.stale_after_s`). Claims of dead sessions are
        taken over; this session's own claims are renewed. Recording a result
        with :meth:`add_measure_results` marks its claim measured.

        With ``trials``, a workload's budget on the target is claimed with its
        candidates: of each workload's candidates, in the order given, at most
        ``trials`` minus :meth:`trials_taken` are claimed anew (this session's
        live claims count as taken, and are renewed), under a lock on the
        workload, so sessions claiming at once never take a workload past ``trials``.

        Parameters
        ----------
        candidate_hashes : list of str
            Candidates added with :meth:`add_candidates`.
        target_hash : str
            The target to be measured on (added with :meth:`add_target`).
        session_id : int
            The claiming session.
        ttl_s : float
            Seconds after which the claim expires even if the session still beats.
        trials : int or None
            Trial measurements per workload on the target (None: no budget).

        Returns
        -------
        set of str
            The candidate hashes this session now holds: measure exactly these.

        Raises
        ------
        DatabaseError
            When a candidate or the target is unknown.
        """
        if not candidate_hashes:
            return set()
        with transaction(self._engine) as conn:
            ids = _require_ids(conn, Candidate.candidate_hash, candidate_hashes, "candidate", "add_candidates")
            target = _require_ids(conn, Target.target_hash, [target_hash], "target", "add_target")
            held = claims.claim(
                conn, [ids[h] for h in candidate_hashes], target[target_hash], session_id,
                ttl_s=ttl_s, stale_after_s=stale_after_s(), budget=trials,
            )
        return {h for h, i in ids.items() if i in held}

    def trials_taken(self, workload_hash: str, target_hash: str) -> int:
        """How much of a workload's trial budget on a target is taken, by any session.

        The candidates with a trial measurement on the target (re-measurements of
        leaders are not trials) plus those under a live unmeasured claim (see
        :meth:`claim_candidates`); 0 for an unknown workload or target. A read:
        it may be out of date by the time it returns; only the claim is atomic.
        """
        with transaction(self._engine, write=False) as conn:
            workload = queries.ids_by_hash(conn, Workload.workload_hash, [workload_hash]).get(workload_hash)
            target = queries.ids_by_hash(conn, Target.target_hash, [target_hash]).get(target_hash)
            if workload is None or target is None:
                return 0
            return claims.trials_taken(conn, workload, target, stale_after_s=stale_after_s())

    def measured_candidates(self, workload_hash: str, target_hash: str) -> dict[str, MeasureRecord]:
        """The newest trial (any status; re-measurements of leaders left out) per candidate hash, for resuming a
        search."""
        with transaction(self._engine, write=False) as conn:
            return queries.measured_candidates(conn, workload_hash, target_hash)

    def candidate_traces(self, workload_hash: str, candidate_hashes: list[str]) -> dict[str, str]:
        """Trace JSON per candidate hash, for those of ``candidate_hashes`` recorded under the workload."""
        with transaction(self._engine, write=False) as conn:
            return queries.candidate_traces(conn, workload_hash, candidate_hashes)

    def best(self, workload_hash: str, target_hash: str) -> tuple[CandidateRecord, float] | None:
        """The fastest candidate of a workload on a target and its latency in seconds.

        A candidate's latency is the median over its ``ok`` measurements' medians
        (see :meth:`candidate_latencies`); a candidate with any ``wrong_result``
        on this target, or a failed re-measurement, never counts. None when nothing qualifies.
        """
        with transaction(self._engine, write=False) as conn:
            return queries.best(conn, workload_hash, target_hash)

    def candidate_latencies(self, workload_hash: str, target_hash: str, limit: int | None = None
                            ) -> list[TrainingRow]:
        """The measured candidates of a workload on a target, fastest first (at most ``limit``).

        Each row's ``median_s`` is the candidate's latency in seconds, the median
        over the medians of its ``ok`` measurements, and ``measurements`` their
        number; candidates with no ``ok`` measurement, any ``wrong_result`` on
        this target, or a re-measurement that failed to build, failed to run or
        timed out (it ran before: it is not to be trusted), are left out.
        """
        with transaction(self._engine, write=False) as conn:
            return queries.candidate_latencies(conn, workload_hash, target_hash, limit)

    def training_rows(
        self, target_hash: str, workload_hashes: list[str] | None = None
    ) -> list[TrainingRow]:
        """Per candidate, its latency (seconds) on a target, as in :meth:`candidate_latencies`: the cost model's data.

        Ordered by workload, then candidate hash. Restricted to ``workload_hashes`` when given.
        """
        with transaction(self._engine, write=False) as conn:
            return queries.training_rows(conn, target_hash, workload_hashes)

    def recorded_models(self) -> list[RecordedModel]:
        """Every model the sessions recorded (see :mod:`database.recorded`), sorted."""
        with transaction(self._engine, write=False) as conn:
            return recorded_models(conn)

    def find_workloads(self, *, model_hashes: Iterable[str] | None = None,
                       workload: str | None = None) -> list[WorkloadRecord]:
        """Workloads of models, or those whose hash starts with ``workload``, by hash.

        Parameters
        ----------
        model_hashes : iterable of str, optional
            Model hashes (``tuner.model_ref.resolve_model`` turns a model as given
            into them): the workloads of those models' extracted programs.
        workload : str, optional
            A workload hash or a prefix of one.
        """
        with transaction(self._engine, write=False) as conn:
            query = select(*(getattr(Workload, name) for name in _WORKLOAD_FIELDS))
            if workload is not None:
                query = query.where(Workload.workload_hash.startswith(workload, autoescape=True))
            if model_hashes is not None:
                members: set[str] = set()
                for text_ in conn.scalars(select(GraphCandidate.workload_hashes).where(
                        GraphCandidate.model_hash.in_(sorted(set(model_hashes))))):
                    members.update(json.loads(text_))
                query = query.where(Workload.workload_hash.in_(sorted(members)))
            rows = conn.execute(query.order_by(Workload.workload_hash))
            return [WorkloadRecord(*row) for row in rows]

    # -- cost models ------------------------------------------------------

    def save_cost_model(
        self,
        target_hash: str,
        feature_version: str,
        booster: bytes,
        record_count: int,
        metrics: dict,
    ) -> int:
        """Store a trained booster (raw bytes) and return its version id.

        Parameters
        ----------
        target_hash : str
            The target its training data came from (must have been added).
        feature_version : str
            The feature set it was trained on; it is only loaded with the same one.
        booster : bytes
            The serialized XGBoost booster.
        record_count : int
            Training rows used.
        metrics : dict
            Evaluation metrics (stored as JSON).
        """
        with transaction(self._engine) as conn:
            target = _require_ids(conn, Target.target_hash, [target_hash], "target", "add_target")
            result = conn.execute(
                CostModelVersion.__table__.insert().values(
                    target_id=target[target_hash],
                    feature_version=feature_version,
                    booster=bytes(booster),
                    record_count=int(record_count),
                    metrics=canonical_json(metrics),
                )
            )
            return int(result.inserted_primary_key[0])

    def latest_cost_model(self, target_hash: str, feature_version: str) -> tuple[bytes, dict] | None:
        """The newest booster bytes and metrics for a target and feature version, or None."""
        with transaction(self._engine, write=False) as conn:
            row = conn.execute(
                select(CostModelVersion.booster, CostModelVersion.metrics)
                .join(Target, Target.id == CostModelVersion.target_id)
                .where(
                    Target.target_hash == target_hash,
                    CostModelVersion.feature_version == feature_version,
                )
                .order_by(CostModelVersion.id.desc())
                .limit(1)
            ).first()
        return None if row is None else (bytes(row.booster), json.loads(row.metrics))

    # -- graph candidates -------------------------------------------------

    def add_graph_candidate(self, graph: GraphCandidateRecord) -> None:
        """Add an extracted program (idempotent by hash; an existing row is kept as is)."""
        row = {
            "graph_hash": graph.graph_hash,
            "model_hash": graph.model_hash,
            "term_text": graph.term_text,
            "workload_hashes": json.dumps(list(graph.workload_hashes)),
            "predicted_latency_s": graph.predicted_latency_s,
            "measured_latency_s": graph.measured_latency_s,
        }
        with transaction(self._engine) as conn:
            _insert_ignore(conn, GraphCandidate, "graph_hash", [row])

    def update_graph_latency(
        self, graph_hash: str, predicted: float | None = None, measured: float | None = None
    ) -> None:
        """Set the predicted and/or measured end-to-end latency (seconds) of a program."""
        values = {}
        if predicted is not None:
            values["predicted_latency_s"] = float(predicted)
        if measured is not None:
            values["measured_latency_s"] = float(measured)
        if not values:
            return
        with transaction(self._engine) as conn:
            result = conn.execute(
                update(GraphCandidate).where(GraphCandidate.graph_hash == graph_hash).values(**values)
            )
            if result.rowcount == 0:
                raise DatabaseError(f"unknown graph candidate {graph_hash}: add_graph_candidate first")

    # -- reference programs -----------------------------------------------

    def add_program_timing(self, timing: ProgramTimingRecord) -> None:
        """Record an end-to-end timing of a reference program (append-only).

        Raises
        ------
        DatabaseError
            The target is unknown (``add_target`` first) or there are no times.
        """
        if not timing.times_s:
            raise DatabaseError(f"no times to record for program {timing.program}")
        with transaction(self._engine) as conn:
            target_id = _require_ids(conn, Target.target_hash, [timing.target_hash], "target", "add_target")
            conn.execute(ProgramTiming.__table__.insert().values(
                model_hash=timing.model_hash, target_id=target_id[timing.target_hash], program=timing.program,
                session_id=timing.session_id, times_s=json.dumps(list(timing.times_s)),
                median_s=timing.median_s))

    def program_timing(self, model_hash: str, target_hash: str, program: str) -> ProgramTimingRecord | None:
        """The newest timing of ``program`` of the model on the target, or None."""
        with transaction(self._engine, write=False) as conn:
            row = conn.execute(
                select(ProgramTiming.times_s, ProgramTiming.session_id)
                .join(Target, Target.id == ProgramTiming.target_id)
                .where(ProgramTiming.model_hash == model_hash, Target.target_hash == target_hash,
                       ProgramTiming.program == program)
                .order_by(ProgramTiming.id.desc()).limit(1)
            ).first()
        if row is None:
            return None
        return ProgramTimingRecord(model_hash, target_hash, program, tuple(json.loads(row.times_s)), row.session_id)

    # -- summary ----------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Row counts per table, by table name."""
        with transaction(self._engine, write=False) as conn:
            return {
                table.name: conn.scalar(select(func.count()).select_from(table))
                for table in Base.metadata.sorted_tables
            }

    # -- cost model versions and replay (queries of the cost model's tools) --

    def targets(self) -> list[TargetRecord]:
        """Every target (target JSON and device key) in the database, oldest first."""
        with transaction(self._engine, write=False) as conn:
            return queries.targets(conn)

    def cost_model_versions(self, target_hash: str | None = None) -> list[dict]:
        """Stored cost model versions, newest first: id, target_hash, feature_version,
        record_count, metrics (dict), created_at (ISO); for one target or all."""
        with transaction(self._engine, write=False) as conn:
            return queries.cost_model_versions(conn, target_hash)

    def cost_model_booster(self, version_id: int) -> tuple[bytes, str, str] | None:
        """Booster bytes, target hash and feature version of a stored version, or None."""
        with transaction(self._engine, write=False) as conn:
            return queries.cost_model_booster(conn, version_id)

    def ok_span(self, target_hash: str) -> tuple[str, str] | None:
        """ISO times of the first and last successful measurement on a target, or None."""
        with transaction(self._engine, write=False) as conn:
            return queries.ok_span(conn, target_hash)

    def measure_log(self, target_hash: str) -> list[tuple[str, str, str, str, float | None, int]]:
        """Every measurement on a target in the order taken:
        (workload hash, candidate hash, trace JSON, status, median seconds or None, row id)."""
        with transaction(self._engine, write=False) as conn:
            return queries.measure_log(conn, target_hash)

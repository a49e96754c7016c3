"""Measuring one batch of schedule candidates: claim, build in the pool, run on a worker, record.

The batch is claimed in the database first (``Database.claim_candidates``), so
concurrent tuners on one database never measure a candidate twice on a target.
Every candidate this session holds ends as one recorded :class:`database.MeasureRecord`,
success or failure, in one write; built artifacts are deleted once measured.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

from database import MeasureRecord, TargetRecord
from measure import Builder, Runner, classify_build_error, first_line

from .kernels import Kernel, kernel_reference
from .space import ScheduleCandidate


class BatchMeasurer:
    """Builds and measures batches of one session, recording every result.

    Parameters
    ----------
    db : database.Database
        Where candidates and measure results are recorded.
    builder, runner : measure.Builder, measure.Runner
        The build pool and the RPC runner (both owned by the caller).
    target : database.TargetRecord
        The target and device key measured on.
    session_id : int
        The recording session.
    check_stop : callable
        Raises ``KeyboardInterrupt`` when the session was asked to stop; called
        before a batch and after its run, so a batch cut by a signal is not recorded.
    """

    def __init__(self, db, builder: Builder, runner: Runner, target: TargetRecord, session_id: int,
                 check_stop: Callable[[], None]) -> None:
        self.db, self.builder, self.runner = db, builder, runner
        self.target, self.session_id, self.check_stop = target, session_id, check_stop
        self._references: dict[str, object] = {}

    def measure(self, kernel: Kernel, batch: list[ScheduleCandidate]) -> list[MeasureRecord]:
        """Claim, build, run and record ``batch`` (candidates of ``kernel``).

        Returns one record per candidate of the batch, in batch order, except the
        candidates another live session holds (it is measuring them): this
        session's new measurements, and for candidates measured elsewhere since
        the search read the database, their newest recorded result. So the list
        may be shorter than the batch, even empty.
        """
        self.check_stop()
        wh = kernel.workload.workload_hash
        self.db.add_candidates([c.record for c in batch])
        held = self.db.claim_candidates([c.record.candidate_hash for c in batch], self.target.target_hash,
                                        self.session_id)
        elsewhere = {}
        if len(held) < len(batch):
            elsewhere = self.db.measured_candidates(wh, self.target.target_hash)
        mine = [c for c in batch if c.record.candidate_hash in held]
        records = {h: r for h, r in elsewhere.items() if h not in held}
        records.update(self._measure_held(kernel, mine) if mine else {})
        return [records[c.record.candidate_hash] for c in batch if c.record.candidate_hash in records]

    def _measure_held(self, kernel: Kernel, batch: list[ScheduleCandidate]) -> dict[str, MeasureRecord]:
        wh = kernel.workload.workload_hash
        if wh not in self._references:
            self._references[wh] = kernel_reference(kernel)
        builds = self.builder.build([c.mod for c in batch])
        built = [(c, b) for c, b in zip(batch, builds) if b.error is None]
        runs = iter(self.runner.run([b for _, b in built], self._references[wh]))
        self.check_stop()  # a signal mid-batch may have killed its processes: record nothing of it
        records = []
        for c, b in zip(batch, builds):
            common = dict(candidate_hash=c.record.candidate_hash, workload_hash=wh,
                          target_hash=self.target.target_hash, worker=self.runner.worker_name,
                          session_id=self.session_id)
            if b.error is not None:
                records.append(MeasureRecord(status=classify_build_error(b.error), error=first_line(b.error),
                                             build_time_s=b.build_time_s, **common))
            else:
                r = next(runs)
                records.extend(MeasureRecord(status="worker_lost", error=lost.error, build_time_s=b.build_time_s,
                                             **dict(common, worker=lost.worker or self.runner.worker_name))
                               for lost in r.retries)  # attempts on workers that died under it, then the outcome
                records.append(MeasureRecord(status=r.status, times_s=r.times_s, error=r.error,
                                             build_time_s=b.build_time_s,
                                             **dict(common, worker=r.worker or self.runner.worker_name)))
        self.db.add_measure_results(records)
        for b in builds:
            if b.artifact_path:
                shutil.rmtree(os.path.dirname(b.artifact_path), ignore_errors=True)
        return {r.candidate_hash: r for r in records}

"""Measuring one batch of schedule candidates: claim, build in the pool, run on a worker, record.

The batch is claimed in the database first (``Database.claim_candidates``), so
concurrent tuners on one database never measure a candidate twice on a target,
and, with a budget, the claim takes its trials from the workload's budget: no
workload is measured past it, however many tuners share the database.
Every candidate this session holds ends as one recorded :class:`database.MeasureRecord`,
success or failure, in one write. The libraries of a kernel's successful
candidates are kept until :meth:`BatchMeasurer.release`, so re-measuring its
leaders (:mod:`tuner.search.confirm`) builds nothing again; the others are deleted
once measured.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

from database import MeasureRecord, MeasureStatus, TargetRecord
from measure import Builder, Runner, classify_build_error, first_line
from tuner.kernels import Kernel, kernel_reference
from tuner.search.search import BudgetTaken
from tuner.space.space import ScheduleCandidate


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
    trials : int or None
        Trials per workload on the target, whoever measures them (None: no budget).
    """

    def __init__(self, db, builder: Builder, runner: Runner, target: TargetRecord, session_id: int,
                 check_stop: Callable[[], None], trials: int | None = None) -> None:
        self.db, self.builder, self.runner = db, builder, runner
        self.target, self.session_id, self.check_stop = target, session_id, check_stop
        self.trials = trials
        self._references: dict[str, object] = {}
        self._kept: dict[str, object] = {}  # candidate hash -> BuildResult of a successful candidate

    def measure(self, kernel: Kernel, batch: list[ScheduleCandidate]) -> list[MeasureRecord]:
        """Claim, build, run and record ``batch`` (candidates of ``kernel``).

        Returns one record per candidate of the batch, in batch order, except the
        candidates another live session holds (it is measuring them): this
        session's new measurements, and for candidates measured elsewhere since
        the search read the database, their newest recorded result. So the list
        may be shorter than the batch, even empty. With ``trials``, only what
        the workload's budget has left is claimed (the batch's first candidates).

        Raises
        ------
        tuner.search.search.BudgetTaken
            Nothing was claimed and the workload's budget is taken (by trials
            and by live claims of other sessions).
        """
        self.check_stop()
        wh, th = kernel.workload.workload_hash, self.target.target_hash
        self.db.add_candidates([c.record for c in batch])
        held = self.db.claim_candidates([c.record.candidate_hash for c in batch], th, self.session_id,
                                        trials=self.trials)
        if not held and self.trials is not None and self.db.trials_taken(wh, th) >= self.trials:
            raise BudgetTaken(f"{self.trials} trials of workload {wh} are taken")
        elsewhere = {}
        if len(held) < len(batch):
            elsewhere = self.db.measured_candidates(wh, th)
        mine = [c for c in batch if c.record.candidate_hash in held]
        records = {h: r for h, r in elsewhere.items() if h not in held}
        records.update(self._measure_held(kernel, mine) if mine else {})
        return [records[c.record.candidate_hash] for c in batch if c.record.candidate_hash in records]

    def _measure_held(self, kernel: Kernel, batch: list[ScheduleCandidate]) -> dict[str, MeasureRecord]:
        wh = kernel.workload.workload_hash
        builds = self.builder.build([c.mod for c in batch])
        built = [(c, b) for c, b in zip(batch, builds) if b.error is None]
        runs = iter(self.runner.run([b for _, b in built], self._reference(kernel)))
        self.check_stop()  # a signal mid-batch may have killed its processes: record nothing of it
        records = []
        for c, b in zip(batch, builds):
            if b.error is not None:
                records.append(self._build_failure(wh, c, b))
            else:
                records += self._run_records(wh, c, next(runs), b.build_time_s)
        self.db.add_measure_results(records)
        ok = {r.candidate_hash for r in records if r.status == MeasureStatus.OK}
        for c, b in zip(batch, builds):
            if c.record.candidate_hash in ok:
                self._kept[c.record.candidate_hash] = b
            else:
                _delete(b)
        return {r.candidate_hash: r for r in records}

    def remeasure(self, kernel: Kernel, candidates: list[ScheduleCandidate], times: list[int]
                  ) -> list[MeasureRecord]:
        """Measure already measured candidates of ``kernel`` again, ``times[i]`` more times each, and record it.

        The measurements are interleaved (every candidate once, then again), so a
        slow spell of the machine falls on all of them alike. No claim is taken:
        a re-measurement adds to a candidate's measurements rather than replacing
        them (see ``Database.candidate_latencies``), and is recorded with
        ``confirm`` set: it is not a trial. Candidates measured by this
        object since the last :meth:`release` run their kept library; others are
        built again (a build that fails now is recorded as such).

        Returns every record written, in the order measured.
        """
        self.check_stop()
        wh = kernel.workload.workload_hash
        missing = [c for c in candidates if c.record.candidate_hash not in self._kept]
        records, built_now = [], {}
        for c, b in zip(missing, self.builder.build([c.mod for c in missing])):
            if b.error is None:
                self._kept[c.record.candidate_hash] = b
                built_now[c.record.candidate_hash] = b.build_time_s
            else:
                records.append(self._build_failure(wh, c, b, confirm=True))
        order = [c for r in range(max(times, default=0)) for c, n in zip(candidates, times)
                 if n > r and c.record.candidate_hash in self._kept]
        runs = self.runner.run([self._kept[c.record.candidate_hash] for c in order], self._reference(kernel))
        self.check_stop()
        for c, r in zip(order, runs):  # a rebuild's time goes with its first run
            records += self._run_records(wh, c, r, built_now.pop(c.record.candidate_hash, 0.0), confirm=True)
        self.db.add_measure_results(records)
        return records

    def _reference(self, kernel: Kernel):
        wh = kernel.workload.workload_hash
        if wh not in self._references:
            self._references[wh] = kernel_reference(kernel)
        return self._references[wh]

    def _common(self, wh: str, c: ScheduleCandidate, build_time_s: float, confirm: bool) -> dict:
        return {"candidate_hash": c.record.candidate_hash, "workload_hash": wh, "target_hash": self.target.target_hash,
                "build_time_s": build_time_s, "session_id": self.session_id, "confirm": confirm}

    def _build_failure(self, wh: str, c: ScheduleCandidate, build, confirm: bool = False) -> MeasureRecord:
        return MeasureRecord(status=classify_build_error(build.error), error=first_line(build.error),
                             worker=self.runner.worker_name, **self._common(wh, c, build.build_time_s, confirm))

    def _run_records(self, wh: str, c: ScheduleCandidate, run, build_time_s: float = 0.0, confirm: bool = False
                     ) -> list[MeasureRecord]:
        """The records of one run: attempts on workers that died under it, then the outcome."""
        common = self._common(wh, c, build_time_s, confirm)
        return [*(MeasureRecord(status=MeasureStatus.WORKER_LOST, error=lost.error,
                                worker=lost.worker or self.runner.worker_name, **common)
                  for lost in run.retries),
                MeasureRecord(status=run.status, times_s=run.times_s, error=run.error,
                              worker=run.worker or self.runner.worker_name, **common)]

    def release(self) -> None:
        """Delete the kept libraries and drop the kernels' references (after a kernel's leaders are
        re-measured, and at the end).

        A reference holds a kernel's inputs, its weight among them (hundreds of MB for a
        GEMM of a 7B model): kept for every kernel of a run they would add up to
        several times the model's weights.
        """
        for b in self._kept.values():
            _delete(b)
        self._kept.clear()
        self._references.clear()


def _delete(build) -> None:
    if build.artifact_path:
        shutil.rmtree(os.path.dirname(build.artifact_path), ignore_errors=True)

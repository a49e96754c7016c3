"""The one tuning API: tune a set of workloads on a target against a database.

:class:`Tuner` is what ``tune run`` and the benchmarks call (MetaSchedule's
``tune_tasks`` is the model). It owns the measuring side: the workers (an embedded
tracker and worker on 127.0.0.1, or a tracker someone else runs), the build pool,
the runner, the batch measurer and the confirmation of each kernel's leaders. The
search itself is :func:`tuner.search.search.tune_kernel`; every measurement goes
into the database as it is made, so a stopped run resumes where it stopped.

Usage::

    with Tuner(target, MeasureConfig(), SearchConfig(trials=16)) as tuner:
        tuner.open(db, session_id)
        outcomes = tuner.tune(kernels, spaces, ModelTrainer())
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from database import CandidateRecord, MeasureRecord
from measure import Builder, LocalRPC, MeasureConfig, Runner, TrackerError, parse_tracker, wait_for_key
from tuner.kernels import Kernel
from tuner.options import TuneError
from tuner.progress import Progress, fmt_us
from tuner.space.space import ScheduleCandidate, ScheduleSpace
from tuner.target import ResolvedTarget

from .confirm import confirm_leaders
from .measuring import BatchMeasurer
from .search import KernelOutcome, ModelTrainer, SearchConfig, resume_state, tune_kernel
from .stop import SearchStop

#: ``on_measured(kernel, candidates, records)``: a batch just measured, in the order it was measured
OnMeasured = Callable[[Kernel, list[ScheduleCandidate], list[MeasureRecord]], None]


class Tuner:
    """Tunes workloads on one target: workers, builder, runner, measurer and confirmation (a context manager).

    Parameters
    ----------
    target : tuner.target.ResolvedTarget
        What to build for and the record measurements are filed under (its key is the RPC key).
    measure : measure.MeasureConfig
        The measurement protocol (repeats, timeouts, retries).
    search : tuner.search.search.SearchConfig
        Trials per workload, batch size, exploration, confirmation.
    tracker : str or None
        ``HOST:PORT`` of a tracker with workers of the target's key; None starts an
        embedded tracker and one worker on 127.0.0.1 for the tuner's lifetime.
    progress : tuner.progress.Progress or None
        Where batch lines and notes go (None: quiet).
    check_stop : callable or None
        Called between batches; raises (``KeyboardInterrupt``) to stop the run.

    The workers, builder and runner stay up from ``__enter__`` to ``__exit__``, across
    databases: :meth:`open` points the tuner at a database and session. ``address``
    and ``key`` name the workers for callers that time a compiled program on them.

    Raises
    ------
    measure.TrackerError
        On entry, when ``tracker`` has no worker of the key within the timeout.
    """

    def __init__(self, target: ResolvedTarget, measure: MeasureConfig, search: SearchConfig,
                 tracker: str | None = None, progress: Progress | None = None,
                 check_stop: Callable[[], None] | None = None) -> None:
        self.target = target
        self.measure_config = measure
        self.search = search
        self.tracker = tracker
        self.progress = progress or Progress(quiet=True)
        self.check_stop = check_stop or (lambda: None)
        self.db = None
        self.measurer: BatchMeasurer | None = None
        self._rpc: LocalRPC | None = None

    def __enter__(self) -> Tuner:
        key = self.target.record.key
        if self.tracker:
            self.address = parse_tracker(self.tracker)
            wait_for_key(self.address, key, timeout_s=self.measure_config.timeout_s)
        else:
            self._rpc = LocalRPC(key=key).__enter__()
            self.address = self._rpc.address
        self.key = key
        try:
            self.builder = Builder(self.target.target, timeout_s=self.measure_config.timeout_s)
            self.runner = Runner(self.address, self.key, self.measure_config)
        except BaseException as exc:
            self._stop_workers(exc)
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self.measurer is not None:
                self.measurer.release()
            self.builder.close()
            self.runner.close()
        finally:
            self._stop_workers(exc[1] if exc else None)

    def end_tuning(self) -> None:
        """Delete the kept libraries and stop the build and run processes; the workers stay.

        For a caller that times compiled programs on the workers once tuning is over:
        the processes' memory is not held beside the programs' weights meanwhile.
        A later :meth:`tune` starts the processes again.
        """
        if self.measurer is not None:
            self.measurer.release()
        self.builder.close()
        self.runner.close()

    def _stop_workers(self, exc) -> None:
        if self._rpc is not None:
            self._rpc.__exit__(type(exc) if exc else None, exc, None)
            self._rpc = None

    def open(self, db, session_id: int) -> Tuner:
        """Record into ``db`` (a ``database.Database``) under session ``session_id`` from now on.

        The target is added to the database (idempotent); built libraries kept for
        the previous database are deleted.
        """
        if self.measurer is not None:
            self.measurer.release()
        db.add_target(self.target.record)
        self.db = db
        self.measurer = BatchMeasurer(db, self.builder, self.runner, self.target.record, session_id,
                                      self.check_stop, trials=self.search.trials)
        return self

    def tune(self, kernels: dict[str, Kernel], spaces: dict[str, ScheduleSpace], trainer: ModelTrainer,
             on_measured: OnMeasured | None = None, keep_builds: bool = False) -> dict[str, KernelOutcome]:
        """Tune each kernel (by workload hash) up to ``search.trials`` measurements of its workload on the target.

        Kernels go largest first (by FLOPs). Each is searched (:func:`tune_kernel`),
        then its leaders are measured again (``search.confirm_top``; none when 0 or
        with no trials). The budget counts every measurement of the workload on the
        target in the database, so a resumed run measures only what is missing, and
        is claimed with the candidates, so runs sharing the database measure at most
        ``search.trials`` of a workload between them.

        ``on_measured`` sees every batch as measured; ``keep_builds`` keeps the built
        libraries of the last kernel for re-measurement (``self.measurer.remeasure``)
        until ``self.measurer.release()``.

        Returns
        -------
        dict
            Workload hash -> :class:`KernelOutcome` (stop reason, measurements before and now).

        Raises
        ------
        tuner.options.TuneError
            Every measured candidate of a workload failed (the most common failure is named).
        KeyboardInterrupt
            From ``check_stop``: the batch in flight is dropped, everything before it is recorded.
        """
        if self.measurer is None:
            raise RuntimeError("Tuner.open(db, session_id) must come before tune()")
        self.progress.start_tuning(len(kernels) * self.search.trials)
        outcomes = {}
        for wh, kernel in sorted(kernels.items(), key=lambda kv: -kv[1].workload.flops):
            space = spaces[wh]
            outcome = self._tune_workload(kernel, space, trainer, on_measured, keep_builds)
            outcomes[wh] = outcome
            if space.space_note:
                self.progress.note(f"{label(kernel)}: {space.space_note}")
            self.progress.kernel_done(label(kernel), outcome.stop_reason, space.space_error, outcome.measured_now,
                                      self.search.trials - outcome.measured_now)
        return outcomes

    def _tune_workload(self, kernel: Kernel, space: ScheduleSpace, trainer: ModelTrainer,
                       on_measured: OnMeasured | None, keep_builds: bool) -> KernelOutcome:
        db, th, trials = self.db, self.target.target_hash, self.search.trials
        wh = kernel.workload.workload_hash
        db.add_workload(kernel.workload)
        self.measurer.trials = trials  # the claims' budget follows ``search``, which a caller may replace
        measured, history, discounted = resume_state(db, wh, th)

        def measure(k: Kernel, batch: list[ScheduleCandidate]) -> list[MeasureRecord]:
            records = self.measurer.measure(k, batch)
            if on_measured is not None:
                on_measured(k, batch, records)
            return records

        def on_batch(k: Kernel, results) -> None:
            best = db.best(wh, th)
            gflops = k.workload.flops / best[1] / 1e9 if best and k.workload.flops else None
            self.progress.batch(label(k), len(db.measured_candidates(wh, th)), trials, gflops,
                                best[1] if best else None, len(results))

        try:
            outcome = tune_kernel(kernel, space, measured, history, trainer, measure, self.search, on_batch,
                                  discounted)
            if trials and self.search.confirm_top:
                self._confirm(kernel, space)
        finally:
            if not keep_builds:
                self.measurer.release()
        # with the budget taken by others, their measurements may still be coming: no verdict
        if trials and measured and outcome.stop_reason != SearchStop.BUDGET_TAKEN and db.best(wh, th) is None:
            failures = Counter((m.status, m.error) for m in measured.values())
            (status, error), _ = failures.most_common(1)[0]
            raise TuneError(f"every candidate of workload {kernel.name} ({wh}) failed: {status}: {error}")
        return outcome

    def _confirm(self, kernel: Kernel, space: ScheduleSpace) -> None:
        """Re-measure the kernel's leaders (:mod:`tuner.search.confirm`) and say how its best changed."""
        db, wh, th, cfg = self.db, kernel.workload.workload_hash, self.target.target_hash, self.search
        before = db.best(wh, th)
        try:
            again = confirm_leaders(kernel, space, lambda n: db.candidate_latencies(wh, th, n),
                                    self.measurer.remeasure, cfg.confirm_top, cfg.confirm_measurements)
        except TrackerError as err:  # the last batch lost the last worker: the choice waits for one at the end
            self.progress.note(f"{label(kernel)}: leaders not measured again: {err}")
            return
        after = db.best(wh, th)
        if again and before and after:
            self.progress.note(
                f"{label(kernel)}: leaders measured again ({len(again)} measurements): best "
                f"{fmt_us(before[1])} us -> {fmt_us(after[1])} us (median of each leader's measurements"
                + (", another candidate)" if after[0] != before[0] else ")"))


def label(kernel: Kernel) -> str:
    """A kernel as progress lines name it: its workload hash's first 8 digits, then its
    name (different workloads can share a name such as ``dense``)."""
    return f"{kernel.workload.workload_hash[:8]} {kernel.name}"


def trial_pairs(batch: list[ScheduleCandidate], records: list[MeasureRecord]
                ) -> list[tuple[CandidateRecord, MeasureRecord]]:
    """The measured candidates of a batch with their records, in the batch's order (unmeasured ones left out)."""
    by_hash = {r.candidate_hash: r for r in records}
    return [(c.record, by_hash[c.record.candidate_hash]) for c in batch if c.record.candidate_hash in by_hash]


"""``tune dataset collect``: measure schedules of many workloads into a tuning database, for hours if asked.

For each :class:`~tuner.dataset.plan.Source` (a built-in model's decoder layer at a
stage and size) the model is imported, its e-graph saturated and its candidate
programs lowered to kernels; every kernel's workload is then tuned by the
:class:`~tuner.search.tune.Tuner` up to ``budget`` measured candidates: the
default schedule, the seeds, sampled schedules chosen by a cost model trained
from nothing for each source (so the spread is not steered by another source's
model), mutants of the fastest and a quarter drawn at random (see
:mod:`tuner.search.search`).

Candidate programs are not checked numerically against the original here (that
is ``tune run``'s business before it compiles one): each kernel is a real kernel
and each schedule is checked against the kernel's unscheduled form when measured.

Each source is one tuning session whose arguments record the source, its
workloads (also those another source measured first), the CPU that measured it
(:func:`cpu_description`) and the 1-, 5- and 15-minute load averages when it
started (the machine may be shared; timings are noisier then), so the exported
data set can say which CPU measured what, under what load.

Resuming and sharing: the Tuner's budget counts every measurement of a workload on
the target, claimed with the candidates, so a collector started again skips what
the database holds and several collectors on one PostgreSQL database share the
work without measuring a candidate twice.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field

from database import GraphCandidateRecord, Heartbeat, SessionStatus, open_database, stale_after_s
from measure import MeasureConfig
from tuner.options import TuneError
from tuner.progress import Progress

from .plan import Source

#: session argument that marks a collector's session
COLLECTOR_ARG = "dataset_collect"


def cpu_description() -> dict:
    """This machine's CPU: ``model_name`` (``/proc/cpuinfo``, "" where unreadable), ``llvm_cpu`` (LLVM's name,
    e.g. ``znver3``) and ``cores`` (logical CPUs)."""
    from measure.tvmapi import host_cpu

    name = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            name = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), "")
    except OSError:
        pass
    return {"model_name": name, "llvm_cpu": host_cpu(), "cores": os.cpu_count() or 1}


@dataclass(frozen=True)
class CollectOptions:
    """What ``tune dataset collect`` was asked to do.

    ``budget``: measured candidates per workload and target (the default schedule
    included); ``time_limit_s``: stop after this many seconds (None: when the plan is
    done); ``candidates``: candidate programs per source from the e-graph.
    """

    db: str | None = None
    budget: int = 16
    models: tuple[str, ...] = ()
    time_limit_s: float | None = None
    candidates: int = 4
    batch_size: int = 8
    confirm_top: int = 3
    seed: int = 0
    target: str | None = None
    tracker: str | None = None
    key: str | None = None

    def __post_init__(self) -> None:
        if self.budget < 1:
            raise TuneError(f"--budget must be at least 1, got {self.budget}")
        if self.time_limit_s is not None and self.time_limit_s <= 0:
            raise TuneError(f"--time-limit must be positive seconds, got {self.time_limit_s}")


@dataclass
class CollectSummary:
    """What a collection did: sources done (their labels), workloads seen, candidates measured now, why it stopped."""

    sources: list[str] = field(default_factory=list)
    workloads: int = 0
    measured: int = 0
    failed_sources: list[str] = field(default_factory=list)
    stop_reason: str = "plan done"


class Collector:
    """Runs a collection (:meth:`run`); SIGINT or SIGTERM stops it at the next batch, keeping what is recorded."""

    def __init__(self, options: CollectOptions, plan: list[Source], progress: Progress | None = None) -> None:
        self.opts = options
        self.plan = plan
        self.progress = progress or Progress(quiet=True)
        self._stop = threading.Event()
        self._deadline = None if options.time_limit_s is None else time.monotonic() + options.time_limit_s
        self.summary = CollectSummary()

    def _on_signal(self, signum, _frame) -> None:
        if self._stop.is_set():
            raise KeyboardInterrupt
        self._stop.set()
        self.progress.note("stopping: the batch in flight is dropped; what was recorded before it is kept")

    def _check_stop(self) -> None:
        if self._stop.is_set():
            self.summary.stop_reason = "interrupted"
            raise KeyboardInterrupt
        if self._deadline is not None and time.monotonic() > self._deadline:
            self.summary.stop_reason = "time limit"
            raise KeyboardInterrupt

    def run(self) -> CollectSummary:
        """Collect over the plan until it is done, the time limit passes or a signal stops it.

        Raises
        ------
        database.DatabaseError, measure.TrackerError
            With one-line messages; every measurement recorded before stays recorded.
        """
        on_main = threading.current_thread() is threading.main_thread()
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)} if on_main else {}
        try:
            self._run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return self.summary

    def _run(self) -> None:
        from tuner.search.search import SearchConfig
        from tuner.search.tune import Tuner
        from tuner.target import resolve_target

        o = self.opts
        target = resolve_target(o.target, o.key)
        db = open_database(o.db)
        try:
            stale = db.mark_stale_sessions_interrupted(stale_after_s())
            if stale:
                self.progress.note(f"{stale} silent session(s) marked interrupted; their claims may be taken over")
            search = SearchConfig(trials=o.budget, batch_size=o.batch_size, seed=o.seed, confirm_top=o.confirm_top)
            cpu = cpu_description()
            with Tuner(target, MeasureConfig(), search, o.tracker, self.progress, self._check_stop) as tuner:
                for i, source in enumerate(self.plan):
                    try:
                        self._check_stop()
                        self.progress.note(f"source {i + 1}/{len(self.plan)}: {source.label()}")
                        self._collect(db, tuner, source, target, cpu)
                    except KeyboardInterrupt:
                        if self.summary.stop_reason == "plan done":
                            self.summary.stop_reason = "interrupted"
                        return
        finally:
            db.close()

    def _collect(self, db, tuner, source: Source, target, cpu: dict) -> None:
        from tuner.model_ref import record_session
        from tuner.search.search import ModelTrainer
        from tuner.space.space import ScheduleSpace

        o = self.opts
        with self.progress.status(f"importing {source.label()} and saturating its e-graph"):
            model_source, model, kernels = source_kernels(source, o.candidates, o.seed, db)
        self._check_stop()
        args = {COLLECTOR_ARG: True, "model": source.model, "stage": source.stage, "seq_len": source.seq_len,
                "kv_len": source.kv_len, "layers": 1, "trials": o.budget, "cpu": cpu,
                "load_average": list(os.getloadavg()), "workloads": sorted(kernels)}
        session_id = record_session(db, args, model_source, model)
        self.progress.note(f"session {session_id}: {len(kernels)} workloads, budget {o.budget} each")
        spaces = {h: ScheduleSpace(k.func, h, target.target, seed=o.seed) for h, k in kernels.items()}
        status = SessionStatus.FINISHED
        try:
            with Heartbeat(db, session_id):
                tuner.open(db, session_id)
                tuner.tune(kernels, spaces, ModelTrainer())
        except KeyboardInterrupt:
            status = SessionStatus.INTERRUPTED
            raise
        except TuneError as err:  # every candidate of a workload failed: say so, go on with the next source
            status = SessionStatus.FAILED
            self.summary.failed_sources.append(source.label())
            self.progress.note(f"{source.label()}: {err}")
        finally:
            db.finish_session(session_id, status)
            self.summary.measured += db.session_trials(session_id)
            self.summary.workloads += len(kernels)
            if status == SessionStatus.FINISHED:
                self.summary.sources.append(source.label())


def source_kernels(source: Source, candidates: int, seed: int, db=None):
    """Import ``source``, saturate its e-graph and lower its candidate programs; one kernel per workload.

    With ``db``, each candidate program is recorded as a graph candidate of the model
    (so ``tune db best --model`` finds its workloads). Returns ``(model_source,
    imported_model, {workload_hash: Kernel})``.

    Raises
    ------
    extract.ModelImportError
        The model cannot be built or imported.
    """
    from extract import check_model, import_model
    from extract.egraph import explore
    from tuner.compile import prepare_weights
    from tuner.kernels import kernels_of, lower_to_kernels

    model_source = check_model(source.model, stage=source.stage, seq_len=source.seq_len, kv_len=source.kv_len)
    model = import_model(model_source, stage=source.stage, seq_len=source.seq_len, kv_len=source.kv_len, seed=seed)
    kernels = {}
    for cand in explore(model.mod, max_candidates=candidates).candidates:
        found = kernels_of(lower_to_kernels(prepare_weights(cand.mod)))
        for k in found:
            kernels.setdefault(k.workload.workload_hash, k)
        if db is not None:
            db.add_graph_candidate(GraphCandidateRecord(model.model_hash, cand.term_text,
                                                        tuple(k.workload.workload_hash for k in found)))
    if db is not None:
        for k in kernels.values():
            db.add_workload(k.workload)
    return model_source, model, kernels

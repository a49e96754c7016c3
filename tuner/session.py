"""One ``tune run``: model -> e-graph candidates -> kernels -> search -> compile -> report.

The session records everything in the tuning database as it goes (workloads,
candidates, every measure result, the cost model, the graph candidates), so an
interrupted run loses nothing and a rerun resumes where it stopped.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from functools import partial

import numpy as np

from database import (
    DEFAULT_TRACE_JSON,
    CandidateRecord,
    DatabaseError,
    GraphCandidateRecord,
    Heartbeat,
    ProgramTimingRecord,
    SessionStatus,
    open_database,
    stale_after_s,
)
from database.session import display_url
from extract import check_model, import_model
from extract.config import dtype_note
from extract.egraph import explore
from extract.equivalence import CandidateMismatch, check_equivalent
from extract.extraction import DEFAULT_BYTES_PER_S, DEFAULT_FLOPS_PER_S
from extract.frontend import torch_module
from extract.quant import WeightFormat, check_config
from measure import LOCAL_KEY, MeasureConfig, parse_tracker, wait_for_key
from measure.threads import physical_cores

from .choose import price_programs
from .compile import (
    ProgramRun,
    build_default,
    build_tuned,
    export,
    prepare_weights,
    prepared_inputs,
    run_on_worker,
    verify,
)
from .contender import Contenders
from .cost_model.dataset import parse_kernel
from .cost_model.node_prices import KernelNodeCost, calibrated_roofline
from .cost_model.roofline import RooflineCostModel
from .cost_model.store import save_model, starting_model
from .kernels import Kernel, kernels_of, lower_to_kernels
from .load import LoadSampler, load_report
from .memory import MemorySampler
from .model_ref import record_session
from .options import PEERS, RunOptions, TuneError
from .peers import installed, layer_peer
from .progress import Progress
from .search.search import ModelTrainer, SearchConfig
from .search.tune import Tuner
from .space.space import ScheduleSpace
from .target import resolve_target

TVM_DEFAULT = "tvm_default"
"""The ``program`` of TVM's untuned default build in the database's ``program_timing``."""


@dataclass
class KernelSummary:
    """Per kernel of the chosen program: latency (seconds), GFLOP/s and trials.

    ``latency_s`` is the best measured latency, or when the kernel has none the
    latency its compiled schedule is priced at (``source``: ``predicted`` by the
    cost model, or the ``roofline`` bound); ``predicted`` is true in both latter cases.
    """

    name: str
    workload_hash: str
    op_kind: str
    calls: int
    flops: float
    latency_s: float | None
    default_latency_s: float | None
    predicted: bool
    trials: int
    new_trials: int
    source: str = "measured"

    @property
    def gflops(self) -> float | None:
        """Achieved GFLOP/s of the best schedule (FLOPs / latency / 1e9)."""
        return self.flops / self.latency_s / 1e9 if self.latency_s and self.flops else None


@dataclass
class RunSummary:
    """What a run reports: the kernels of the chosen program and end-to-end latencies.

    ``repriced`` (with ``--reprice``, else None) tells what the extraction with tuned
    kernel prices gave: its program's ``term_hash``, whether it was ``new`` (no candidate
    had it) and ``added`` (new and numerically equal to the original, so tuned and
    priced), and how many kinds of GEMM-like e-node were ``priced`` by a tuned kernel or
    ``estimated`` by the calibrated roofline. ``measured_trials`` counts the
    session's trials (measurements of candidates, any status), ``confirm_measurements``
    its re-measurements of the kernels' leaders (:mod:`tuner.search.confirm`).
    ``latency_s`` holds the seconds of ``tuned``, ``tvm_default``, ``torch_eager`` and of
    every peer of :data:`tuner.options.PEERS` (``torch_compile``,
    ``torch_compile_max_autotune``, ``onnxruntime``): None for a peer not asked for
    (``tune run`` asks for ``torch_compile`` and ``onnxruntime``), not installed, not
    checked equal to the reference or failed, and for every peer with ``--no-peers``; ``peers`` gives each peer that was
    built its status, compile time and error (:meth:`tuner.contender.ContenderResult.as_json`).
    ``load_average`` is :func:`tuner.load.load_report`: the largest 1-minute load
    average while tuning and while timing, and the cores the run may use.
    ``memory`` is :meth:`tuner.memory.MemorySampler.report`: the run's peak memory
    (bytes, this process and the processes it started) beside its weights' bytes.
    ``quantization`` (None for float32 weights) tells a run with ``--weights-dtype``: the format
    (``weights_dtype``, ``group_size``), ``weight_bytes``
    (:meth:`extract.quantized.QuantizedModel.weight_bytes`: resident bytes of the run's weights,
    scales included, beside float32 and every format's), ``reference_max_abs_error`` (check (a):
    the program against the float64 reference of the same quantized model, within
    ``check_tolerance``; ``max_abs_error`` is the same figure) and ``vs_float32`` (check (b), not
    a pass/fail: :meth:`extract.quantized.QuantizedModel.cost` of the fastest program's outputs).
    ``tvm_default`` says where ``latency_s["tvm_default"]`` comes from: ``session_id``
    of the session that timed TVM's default build and ``reused`` (true when an earlier
    session's timing stored in the database was reused, not timed again).
    """

    session_id: int
    model: str
    stage: str
    target: str
    kernels: list[KernelSummary]
    latency_s: dict[str, float | None]
    measured_trials: int
    graph: dict
    saturation: dict
    artifact: str
    max_abs_error: float
    candidates: list[dict] = field(default_factory=list)
    programs_timed: list[dict] = field(default_factory=list)
    repriced: dict | None = None
    confirm_measurements: int = 0
    peers: list[dict] = field(default_factory=list)
    load_average: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    tvm_default: dict = field(default_factory=dict)
    quantization: dict | None = None

    def as_json(self) -> dict:
        """The summary as plain JSON values (what ``--json`` prints)."""
        data = asdict(self)
        for k, summary in zip(data["kernels"], self.kernels):
            k["gflops"] = summary.gflops
        return data


#: what ``tune run`` says on a first SIGINT or SIGTERM, by phase
_STOP_NOTES = {
    "prepare": "stopping after the step in progress (nothing is measured yet)",
    "tune": "stopping: the batch in flight is dropped; what was recorded before it is kept",
    "finish": "tuning is done: the final compile and timing run to the end (a second signal stops at once)",
}


class RunInterrupted(KeyboardInterrupt):
    """A stopped run; its message says what the session kept and released (see :func:`stop_summary`)."""


def stop_summary(trials: int, confirms: int, released: int) -> str:
    """What an interrupted session leaves behind, in words.

    ``trials`` and ``confirms`` count the measurements it recorded (failures
    included) and its re-measurements of leaders; ``released`` the claims on
    candidates it did not measure, which other runs may now take.
    """
    def count(n: int, word: str) -> str:
        return f"{n} {word}{'' if n == 1 else 's'}"

    if trials or confirms:
        kept = f"{count(trials, 'trial')} measured and kept in this session (failures included)"
        if confirms:
            kept += f", {count(confirms, 're-measurement')} of leaders"
    else:
        kept = "nothing was measured in this session"
    freed = f"{count(released, 'claim')} released for other runs" if released else "no claim left to release"
    return f"{kept}; {freed}"


class TuneRun:
    """One tuning session; ``run()`` does it all and returns the summary.

    Raises (from ``run``)
    ---------------------
    extract.ModelImportError, database.DatabaseError, measure.TrackerError, TuneError
        With one-line messages; whatever was recorded before stays recorded.
    """

    def __init__(self, options: RunOptions, progress: Progress | None = None) -> None:
        self.opts = options
        self.progress = progress or Progress(quiet=True)
        self.measure_config = MeasureConfig(
            number=options.number,
            repeat=options.repeat,
            min_repeat_ms=options.min_repeat_ms,
            cold_bytes=options.cold_bytes,
            timeout_s=options.timeout_s,
            max_cv=options.max_cv,
            device_wait_s=options.device_wait_s,
            retries=options.retries,
        )
        self.search_config = SearchConfig(trials=options.trials, batch_size=options.batch_size, seed=options.seed,
                                          confirm_top=options.confirm_top)
        self._stop = threading.Event()
        self._phase = "prepare"  # "prepare", "tune" or "finish": what a stop signal lets complete
        self._tuning_load = LoadSampler()
        self._timing_load = LoadSampler()
        self._quant = None  # the QuantizedModel of a run with --weights-dtype

    def run(self) -> RunSummary:
        """Tune, compile, verify and time; see the module docstring.

        SIGINT or SIGTERM stops the run at the next batch boundary: the batch in
        flight is not recorded (its worker processes may have died with the
        signal), everything before it is, and the session is marked
        ``interrupted``; a second signal stops at once. Before tuning starts the
        run stops after the candidate check in progress; once tuning is done the
        final compile and timing run to the end.
        """
        if threading.current_thread() is not threading.main_thread():
            return self._run_all()
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            return self._run_all()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_signal(self, signum, _frame) -> None:
        if self._stop.is_set():
            raise KeyboardInterrupt
        self._stop.set()
        self.progress.note(_STOP_NOTES[self._phase])

    def _check_stop(self) -> None:
        if self._stop.is_set():
            raise KeyboardInterrupt

    def _run_all(self) -> RunSummary:
        o = self.opts
        target = resolve_target(o.target, o.key)
        if not o.tracker and target.target.kind.name != "llvm":
            raise TuneError(
                f"the embedded worker measures on this CPU; a {target.target.kind.name} target needs "
                "--tracker HOST:PORT --key KEY naming workers of that device"
            )
        if o.tracker:  # fail fast on a bad or unreachable tracker, before any heavy work
            wait_for_key(parse_tracker(o.tracker), o.key or LOCAL_KEY, timeout_s=o.timeout_s)
        # the cheap model checks, then the database, before the model import (minutes for a large model)
        source = check_model(o.model, stage=o.stage, seq_len=o.seq_len, kv_len=o.kv_len, layers=o.layers)
        if source.config and (note := dtype_note(source.config)):
            self.progress.note(note)
        fmt = None
        if o.weights_dtype != "float32":
            if source.kind != "config":
                raise TuneError(f"--weights-dtype {o.weights_dtype} needs a config model: an ONNX file has no "
                                "PyTorch module to check the quantized program against")
            fmt = WeightFormat(o.weights_dtype, o.group_size)
            check_config(fmt, source.config)
        try:
            db = open_database(o.db)
        except DatabaseError as exc:  # name the option, as the reading commands do
            raise DatabaseError(f"--db: {exc}") from None
        try:
            with MemorySampler() as memory:
                with self.progress.status("importing the model"):
                    model = import_model(source, stage=o.stage, seq_len=o.seq_len, kv_len=o.kv_len, layers=o.layers,
                                         seed=o.seed)
                if fmt is not None:
                    model = self._quantize(model, source, fmt)
                self._check_stop()
                summary = self._run(db, source, model, target)
            summary.memory = memory.report(sum(p.nbytes for p in model.params))
            return summary
        finally:
            db.close()

    def _quantize(self, model, source, fmt: WeightFormat):
        """``model`` with its linear weights in ``fmt`` (:func:`extract.quantized.quantize_model`), kept for the
        summary."""
        from extract.quantized import quantize_model

        o = self.opts
        with self.progress.status(f"quantizing the linear weights to {fmt.label}"):
            self._quant = quantize_model(model, fmt, partial(torch_module, source, stage=o.stage, seq_len=o.seq_len,
                                                             kv_len=o.kv_len, layers=o.layers, seed=o.seed))
        return self._quant.model

    def _run(self, db, source, model, target) -> RunSummary:
        o = self.opts
        target_rec = target.record
        db.add_target(target_rec)
        args = session_arguments(o)
        stale = db.mark_stale_sessions_interrupted(stale_after_s())
        if stale:
            self.progress.note(f"{stale} silent session(s) marked interrupted; their claims may be taken over")
        session_id = record_session(db, args, source, model)
        self.progress.note(f"session {session_id}: {model.source} on {db.url_display}")
        try:
            with Heartbeat(db, session_id):
                summary = self._tune(db, model, target, target_rec, session_id)
        except KeyboardInterrupt:
            released = db.finish_session(session_id, SessionStatus.INTERRUPTED)
            raise RunInterrupted(stop_summary(db.session_trials(session_id),
                                              db.session_trials(session_id, confirm=True), released)) from None
        except BaseException:
            db.finish_session(session_id, SessionStatus.FAILED)
            raise
        db.finish_session(session_id, SessionStatus.FINISHED)
        return summary

    def _tune(self, db, model, target, target_rec, session_id) -> RunSummary:
        o = self.opts
        example = list(model.inputs) + list(model.params)
        with self.progress.status("saturating the e-graph"):
            exploration = explore(model.mod, max_candidates=o.max_candidates)
        self._check_stop()
        rep = exploration.report
        self.progress.note(
            f"e-graph: {rep.iterations} iterations, {rep.enodes} e-nodes, stop: {rep.stop_reason}, "
            f"rewrites fired: {', '.join(f'{k}={v}' for k, v in rep.rules_fired.items() if v) or 'none'}"
        )
        graphs = []
        cand_info = []
        for cand in exploration.candidates:
            self._add_candidate(db, model, example, cand, graphs, cand_info)
        if not graphs:
            raise TuneError("no candidate program matched the original numerically")
        workloads = self._workloads(db, graphs, {})
        self.progress.note(f"{len(graphs)} candidate programs, {len(workloads)} distinct workloads")

        trainer = ModelTrainer(starting_model(db, target_rec.target_hash, target.target.kind.name,
                                              self.progress.note))
        spaces = {h: ScheduleSpace(k.func, h, target.target, seed=o.seed) for h, k in workloads.items()}
        new_trials: Counter = Counter()
        with Tuner(target, self.measure_config, self.search_config, o.tracker, self.progress,
                   self._check_stop) as tuner:
            tuner.open(db, session_id)

            def tune(todo: dict[str, Kernel]) -> None:
                outcomes = tuner.tune(todo, spaces, trainer)
                new_trials.update({h: outcome.measured_now for h, outcome in outcomes.items()})

            self._phase = "tune"
            with self._tuning_load:  # the load average while tuning, for the summary
                tune(workloads)
                # Extraction again, each GEMM-like e-node priced by its tuned kernel: a program
                # that mixes what each candidate did best; its new kernels are tuned too.
                known = repriced = None
                if o.reprice:
                    repriced, known = self._add_repriced(db, model, example, exploration, graphs, cand_info,
                                                         spaces, target_rec, trainer)
                    if repriced["added"]:
                        new = self._workloads(db, graphs[-1:], workloads)
                        spaces.update({h: ScheduleSpace(k.func, h, target.target, seed=o.seed) for h, k in new.items()})
                        workloads.update(new)
                        tune(new)
                tuner.end_tuning()
            tracker, key = tuner.address, tuner.key
            self.progress.stop_tuning()
            save_model(db, target_rec.target_hash, trainer)
            self._check_stop()
            self._phase = "finish"
            ranked, prices, choices = self._choose(db, graphs, spaces, target_rec, trainer, known)
            # the last worker may have been lost in the last batch: say so rather than fail inside the timing
            wait_for_key(tracker, key, timeout_s=min(o.device_wait_s, o.timeout_s))
            default = self._stored_default(db, model, target_rec)
            timed, latency, artifact, err, peers, outputs = self._compile_and_time(
                model, target.target, ranked[:o.measure_top], spaces, choices, tracker, key, session_id, default)
            if default is None:
                db.add_program_timing(ProgramTimingRecord(model.model_hash, target_rec.target_hash, TVM_DEFAULT,
                                                          latency.pop("tvm_default_times_s"), session_id))
            default_from = {"session_id": default.session_id if default else session_id, "reused": default is not None}
        for c, measured in timed:
            db.update_graph_latency(_graph_hash(model.model_hash, c.term_text), predicted=prices[c.term_hash],
                                    measured=measured)
        cand, _, kernels = next(g for g in ranked if g[0].term_hash == min(timed, key=lambda t: t[1])[0].term_hash)
        summary_kernels = [self._kernel_summary(db, k, target_rec, new_trials, choices[k.workload.workload_hash])
                           for k in kernels]
        return RunSummary(
            session_id=session_id,
            model=model.source,
            stage=o.stage,
            target=target_rec.target_json,
            kernels=summary_kernels,
            latency_s=latency,
            measured_trials=db.session_trials(session_id),
            confirm_measurements=db.session_trials(session_id, confirm=True),
            graph={"term_hash": cand.term_hash, "rewrites": list(cand.rewrites),
                   "predicted_latency_s": prices[cand.term_hash]},
            saturation={"iterations": rep.iterations, "enodes": rep.enodes, "eclasses": rep.eclasses,
                        "time_s": rep.time_s, "stop_reason": rep.stop_reason, "rules_fired": dict(rep.rules_fired)},
            artifact=artifact,
            max_abs_error=err,
            candidates=cand_info,
            programs_timed=[{"term_hash": c.term_hash, "rewrites": list(c.rewrites),
                             "predicted_latency_s": prices[c.term_hash], "measured_latency_s": t} for c, t in timed],
            repriced=repriced,
            peers=peers,
            load_average=load_report(self._tuning_load, self._timing_load),
            tvm_default=default_from,
            quantization=self._quantization(err, outputs),
        )

    def _quantization(self, err: float, outputs) -> dict | None:
        """:attr:`RunSummary.quantization` of the fastest program (``err``: check (a), ``outputs``: its outputs)."""
        q = self._quant
        if q is None:
            return None
        from extract.quantized import CHECK_TOLERANCE

        return {"weights_dtype": q.format.dtype, "group_size": q.format.group_size, "weight_bytes": q.weight_bytes(),
                "reference_max_abs_error": err, "check_tolerance": CHECK_TOLERANCE, "vs_float32": q.cost(outputs)}

    def _add_candidate(self, db, model, example, cand, graphs: list, cand_info: list) -> bool:
        """Check ``cand`` against the original; when it matches, lower it and append it to ``graphs``."""
        with self.progress.status(f"checking candidate {cand.term_hash[:10]} numerically"):
            try:
                err = check_equivalent(model.mod, cand.mod, example)
            except CandidateMismatch as mismatch:
                cand_info.append({"term_hash": cand.term_hash, "rewrites": list(cand.rewrites), "error": str(mismatch)})
                self.progress.note(f"candidate {cand.term_hash[:10]} dropped: {mismatch}")
                return False
        self._check_stop()
        fused = lower_to_kernels(prepare_weights(cand.mod))
        kernels = kernels_of(fused)
        graphs.append((cand, fused, kernels))
        cand_info.append({"term_hash": cand.term_hash, "rewrites": list(cand.rewrites), "max_abs_error": err,
                          "kernels": len(kernels), "strategy": cand.strategy})
        db.add_graph_candidate(GraphCandidateRecord(
            model.model_hash, cand.term_text, tuple(k.workload.workload_hash for k in kernels)))
        return True

    @staticmethod
    def _workloads(db, graphs: list, known: dict[str, Kernel]) -> dict[str, Kernel]:
        """The kernels of ``graphs`` not in ``known``, one per workload, recorded in the database.

        A workload the database already holds is tuned on its stored kernel: a workload's
        hash leaves out its blocks' names, which come from the program it was first seen
        in (another model, or the same layer with other weights), and its stored traces
        name the blocks as that kernel does.
        """
        new: dict[str, Kernel] = {}
        for _, _, kernels in graphs:
            for k in kernels:
                if k.workload.workload_hash not in known:
                    new.setdefault(k.workload.workload_hash, k)
        for wh, k in new.items():
            stored = db.get_workload(wh)
            if stored is None:
                db.add_workload(k.workload)
            elif stored.script != k.workload.script:
                new[wh] = replace(k, func=parse_kernel(stored.script))
        return new

    def _add_repriced(self, db, model, example, exploration, graphs, cand_info, spaces, target_rec, trainer):
        """Extract once more with GEMM-like e-nodes priced by their tuned kernels (:mod:`tuner.cost_model.node_prices`).

        Appends the program to ``graphs`` when it is new and matches the original. Returns
        what it did (:attr:`RunSummary.repriced`) and the kernel choices of the programs before it.
        """
        _, choices = price_programs(db, graphs, spaces, target_rec.target_hash, trainer)
        records = {k.workload.workload_hash: k.workload for _, _, kernels in graphs for k in kernels}
        tuned = [(records[wh], c.seconds) for wh, c in choices.items()
                 if c.source == "measured" and records[wh].op_kind == "matmul"]
        # Nominal peaks, not this machine's measured ones: the same database gives the same
        # prices, so a rerun extracts the same program (the calibration scales to this machine).
        nominal = RooflineCostModel(DEFAULT_FLOPS_PER_S, DEFAULT_BYTES_PER_S)
        cost = KernelNodeCost({wh: c.seconds for wh, c in choices.items()}, calibrated_roofline(tuned, nominal))
        with self.progress.status("extracting again with tuned kernel prices"):
            cand = exploration.extract_best(cost)
        known = {c["term_hash"] for c in cand_info}  # a dropped candidate is not checked again
        self.progress.note(f"e-graph extracted again, {cost.priced} kinds of GEMM e-node priced by their tuned "
                           f"kernels, {cost.estimated} estimated: "
                           + ("a candidate already checked" if cand.term_hash in known
                              else f"new program {cand.term_hash[:10]} [{'+'.join(cand.rewrites) or 'original'}]"))
        new = cand.term_hash not in known
        added = new and self._add_candidate(db, model, example, cand, graphs, cand_info)
        return ({"term_hash": cand.term_hash, "new": new, "added": added, "priced": cost.priced,
                 "estimated": cost.estimated}, choices)

    def _choose(self, db, graphs, spaces, target_rec, trainer, known=None):
        """The candidate programs, cheapest first (see ``tuner.choose``), their prices and the kernels' choices.

        ``known``: kernel choices made before, for workloads not tuned since."""
        prices, choices = price_programs(db, graphs, spaces, target_rec.target_hash, trainer, known)
        sources = {c.source for c in choices.values()}
        if "predicted" in sources:
            self.progress.note("some kernels have no measurement: each is compiled with the schedule the cost model "
                               "predicts fastest")
        if "roofline" in sources:
            self.progress.note("some kernels have no measurement and too few records train the cost model: "
                               "they are priced by their roofline lower bound on this machine")
        ranked = sorted(graphs, key=lambda g: prices[g[0].term_hash])
        self.progress.note(
            "programs priced (sum of kernel latencies): "
            + ", ".join(f"{c.term_hash[:10]}[{'+'.join(c.rewrites) or 'original'}]={prices[c.term_hash] * 1e3:.3f} ms"
                        for c, _, _ in graphs)
        )
        return ranked, prices, choices

    def _kernel_summary(self, db, k, target_rec, new_trials, choice) -> KernelSummary:
        wh = k.workload.workload_hash
        measured = db.measured_candidates(wh, target_rec.target_hash)
        default_hash = CandidateRecord(wh, DEFAULT_TRACE_JSON).candidate_hash
        default = [r for r in db.candidate_latencies(wh, target_rec.target_hash) if r.candidate_hash == default_hash]
        return KernelSummary(
            name=k.name, workload_hash=wh, op_kind=k.workload.op_kind, calls=k.calls, flops=k.workload.flops,
            latency_s=choice.seconds, default_latency_s=default[0].median_s if default else None,
            predicted=choice.source != "measured", trials=len(measured), new_trials=new_trials.get(wh, 0),
            source=choice.source,
        )

    def _stored_default(self, db, model, target_rec) -> ProgramTimingRecord | None:
        """The stored timing of TVM's default build of this model on this target, when it may be reused.

        None with ``--retime-default``, when none is stored, or when the model has no
        reference outputs of its own (then the default build's outputs are the reference).
        """
        if self.opts.retime_default or model.reference_outputs() is None:
            return None
        stored = db.program_timing(model.model_hash, target_rec.target_hash, TVM_DEFAULT)
        if stored is not None:
            self.progress.note(f"TVM's default build: its timing from session {stored.session_id} is reused "
                               "(--retime-default times it again)")
        return stored

    def _compile_and_time(self, model, target, ranked, spaces, choices, tracker, key, session_id, default=None):
        """Build the cheapest programs of ``ranked`` and TVM's default build, time them on the worker.

        TVM's default build is timed first, in a worker session of its own (so the
        worker never holds its weights and intermediates beside the programs'), unless
        ``default``, a stored timing of it (:meth:`_stored_default`), is given: it is then
        neither built nor timed. The candidate programs are timed interleaved, round by
        round (:func:`tuner.compile.run_on_worker`): in each round one repeat of every
        candidate program on the worker, one after the other, then PyTorch eager in this
        process (enough calls a round for at least 5 in all, after 2 untimed calls in the
        first), then one repeat of every installed peer of ``--peers``, each in a process
        of its own and checked against the reference before it is timed
        (:class:`tuner.contender.Contenders`), so a change of the machine's load meanwhile
        slows each contender alike; each figure is the median of its repeats. The
        1-minute load average is sampled meanwhile.

        Returns ``(timed, latency, artifact, max_abs_error, peers, outputs)``: ``timed`` pairs each
        program's candidate with its measured seconds; ``latency`` holds the fastest
        one's (``tuned``), the default build's, PyTorch eager's and every peer's seconds
        (None for a peer not timed; and, when the default build was timed now, its repeat
        times as ``tvm_default_times_s``); the artifact is the fastest program's library
        (the others are removed); ``peers`` is each built peer's
        :meth:`tuner.contender.ContenderResult.as_json`; ``outputs`` the fastest program's outputs.
        With quantized weights the reference is the float64 one of the same quantized model and
        the tolerance :data:`extract.quantized.CHECK_TOLERANCE`.

        Raises
        ------
        VerificationError
            When a program's outputs differ from the reference.
        """
        o = self.opts
        stem = os.path.join(os.path.abspath(o.artifact_dir), f"{_slug(model.source)}-s{session_id}")
        paths = []
        for i, (cand, fused, kernels) in enumerate(ranked):
            scheduled = {}
            for k in kernels:
                choice = choices[k.workload.workload_hash]
                if choice.scheduled:
                    scheduled[k.name] = spaces[k.workload.workload_hash].replay(choice.record).mod
            with self.progress.status(f"building candidate program {i + 1} of {len(ranked)} ({cand.term_hash[:10]})"):
                paths.append(export(build_tuned(fused, scheduled, target), f"{stem}-{cand.term_hash[:10]}.so"))
        args = list(model.inputs) + list(model.params)
        if default is None:
            with self.progress.status("building TVM's default program"):
                default_path = export(build_default(model.mod, target), stem + "-tvm-default.so")
            with self.progress.status("timing TVM's default program"), self._timing_load:
                (default,) = run_on_worker([default_path], args, tracker, key, self.measure_config)
        eager: list[float] = []
        between = None
        if model.has_torch:
            per_round = -(-max(o.repeat, 5) // o.repeat)  # at least 5 eager calls in all

            def between(r: int) -> None:
                eager.extend(model.torch_eager(repeat=per_round, warmup=2 if r == 0 else 0))

        builds = self._peer_builds(model)
        reference = model.reference_outputs()
        with Contenders(builds, reference or ()) as peers:
            if builds:
                with self.progress.status(f"building and checking the peers ({', '.join(builds)})"):
                    peers.start()
            for name, result in peers.results.items():
                if result.status != "ok":
                    self.progress.note(f"peer {name}: {result.status}, not timed: {result.error}")

            def each_round(r: int) -> None:
                if between is not None:
                    between(r)
                peers.time_round()

            what = "the programs and PyTorch eager, interleaved" if model.has_torch else "the programs, interleaved"
            with self.progress.status(f"timing {what}" + (" with the peers" if builds else "")), self._timing_load:
                runs = run_on_worker(paths, args, tracker, key, self.measure_config,
                                     [prepared_inputs(fused) for _, fused, _ in ranked], each_round)
        timed_now = [(f"program {c.term_hash[:10]}", r) for (c, _, _), r in zip(ranked, runs)]
        if isinstance(default, ProgramRun):
            timed_now.append(("TVM's default program", default))
        for what, run in timed_now:
            if len(run.times_s) < o.repeat:
                self.progress.note(f"{what} takes {run.median_s:.3g} s a call: timed {len(run.times_s)} times, "
                                   f"not {o.repeat}")
        reference = reference or default.outputs  # a stored default comes with a reference
        if self._quant is not None:
            from extract.quantized import CHECK_TOLERANCE

            errors = [verify(run.outputs, reference, CHECK_TOLERANCE, CHECK_TOLERANCE) for _, run in timed_now]
        else:
            errors = [verify(run.outputs, reference) for _, run in timed_now]
        fastest = min(range(len(runs)), key=lambda i: runs[i].median_s)
        for i, path in enumerate(paths):
            if i != fastest:
                os.remove(path)
        if len(runs) > 1:
            self.progress.note("programs timed end to end: " + ", ".join(
                f"{c.term_hash[:10]}={r.median_s * 1e3:.3f} ms" for (c, _, _), r in zip(ranked, runs)))
        torch_s = float(np.median(eager)) if eager else None
        timed = [(c, r.median_s) for (c, _, _), r in zip(ranked, runs)]
        latency = {"tuned": runs[fastest].median_s, "tvm_default": default.median_s, "torch_eager": torch_s}
        latency.update({name: None for name in PEERS if name != "torch_eager"})
        latency.update({name: r.median_s for name, r in peers.results.items()})
        if isinstance(default, ProgramRun):
            latency["tvm_default_times_s"] = default.times_s
        return (timed, latency, paths[fastest], errors[fastest], [r.as_json() for r in peers.results.values()],
                runs[fastest].outputs)

    def _peer_builds(self, model) -> dict:
        """The builds of the peers ``--peers`` names that are installed, for a model with a PyTorch module."""
        o = self.opts
        if not model.has_torch:
            return {}
        if self._quant is not None:
            if any(name != "torch_eager" and installed(name) for name in o.peers):
                self.progress.note("the peers run float32 weights: not timed beside a quantized program")
            return {}
        threads = physical_cores()
        return {name: partial(layer_peer, name, o.model, o.stage, o.seq_len, o.kv_len, o.layers, o.seed, threads)
                for name in o.peers if name != "torch_eager" and installed(name)}


def session_arguments(options: RunOptions) -> dict:
    """The run's options as stored with its session: plain JSON values, the database URL's credentials masked."""
    args = asdict(options)
    if args["db"]:
        args["db"] = display_url(args["db"])  # never store a password in the database
    return args


def _graph_hash(model_hash: str, term_text: str) -> str:
    return GraphCandidateRecord(model_hash, term_text).graph_hash


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-." else "-" for ch in text).strip("-")[:80]



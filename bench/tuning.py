"""Tuning a Qwen3 matmul kernel with our tuner and with TVM MetaSchedule, and timing the result.

Ours is the product's own path: a Relax ``matmul`` lowered by ``tuner.kernels``
into a kernel (workload), ``tuner.space.space.ScheduleSpace`` candidates, the
``tuner.search.tune.Tuner`` (the one tuning API ``tune run`` calls: the search loop
with the XGBoost ``ModelTrainer``, builds in ``measure.Builder``'s process pool, runs
on a real TVM RPC worker on 127.0.0.1 through ``measure.Runner``), every result recorded in a real
SQLite tuning database. The anchor is MetaSchedule's ``tune_tir`` with
its defaults (evolutionary search, XGBoost cost model, local builder and runner).

Every best schedule, ours or MetaSchedule's, is then timed by the same timer
(:func:`bench.common.median_times`) in this process, beside numpy and PyTorch.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import tvm

from database import CandidateRecord, MeasureRecord, MeasureStatus, SessionStatus, open_database
from measure import MeasureConfig
from measure.roofline import llc_bytes
from measure.tvmapi import apply_trace
from tuner.cost_model.node_prices import node_kernel
from tuner.cost_model.store import load_warm_model, save_model
from tuner.kernels import Kernel
from tuner.search.search import ModelTrainer, SearchConfig
from tuner.search.tune import Tuner, trial_pairs
from tuner.space.space import ScheduleSpace
from tuner.target import default_target, resolve_target

from .common import median_time, variants_for


@dataclass(frozen=True)
class MatmulShape:
    """``out[M, N] = x[M, K] @ w[K, N]`` in float32 (a linear layer with its weight pre-transposed)."""

    name: str
    m: int
    k: int
    n: int

    @property
    def flops(self) -> float:
        """2 M N K (a multiply-add counts 2)."""
        return 2.0 * self.m * self.n * self.k

    @property
    def bytes_moved(self) -> float:
        """Bytes of x, w and out in float32 (each read or written once: the roofline's minimum traffic)."""
        return 4.0 * (self.m * self.k + self.k * self.n + self.m * self.n)

    def label(self) -> str:
        """``name MxKxN``."""
        return f"{self.name} {self.m}x{self.k}x{self.n}"


def bench_target(cores: int | None = None) -> tvm.target.Target:
    """This CPU as an LLVM target with ``cores`` threads (default all)."""
    return resolve_target(default_target(cores)).target


def matmul_kernel(shape: MatmulShape) -> Kernel:
    """The kernel TVM's standard lowering (``tuner.kernels``) makes of one Relax ``matmul``."""
    return node_kernel("matmul", (shape.m, shape.n), "float32", [(shape.m, shape.k), (shape.k, shape.n)])


def packed_kernel(shape: MatmulShape) -> Kernel:
    """The kernel our e-graph emits for the projection on a packed weight (rule ``weight_layout``).

    ``dense_packed``: ``x [M, K]`` times the weight packed once into ``[N / b, K, b]``
    (:func:`pack_weight`, ``b`` = :data:`extract.rules.PACK_BLOCK`) -> ``[M, N]``.
    """
    return node_kernel("dense_packed", (shape.m, shape.n), "float32", [(shape.m, shape.k), (shape.n, shape.k)])


def pack_weight(w: np.ndarray) -> np.ndarray:
    """``w [K, N]`` (``x @ w``) in the packed layout ``[N / b, K, b]`` that :func:`packed_kernel` reads."""
    from extract.rules import PACK_BLOCK

    k, n = w.shape
    return np.ascontiguousarray(w.reshape(k, n // PACK_BLOCK, PACK_BLOCK).transpose(1, 0, 2))


@dataclass(frozen=True)
class Trial:
    """One measurement in the order it was made: its candidate and median time (None: failed)."""

    trace_json: str
    median_s: float | None


def best_so_far(trials: list[Trial], budget: int) -> Trial | None:
    """The fastest successful trial among the first ``budget`` (by the tuner's own measurement)."""
    ok = [t for t in trials[:budget] if t.median_s is not None]
    return min(ok, key=lambda t: t.median_s) if ok else None


class OurTuner:
    """Our tuner (:class:`tuner.search.tune.Tuner`) with a local tracker, one RPC worker and a build pool.

    A context manager. The measuring processes stay up across databases: :meth:`open`
    switches the tuning database (each is a real SQLite file with its own session).
    Leaders are not measured again (``confirm_top`` 0): each trial is one measurement,
    as MetaSchedule's are.

    Parameters
    ----------
    target : tvm.target.Target
        What to tune for.
    config : MeasureConfig
        The measurement protocol.
    batch_size : int
        Candidates per batch (the cost model retrains between batches).
    """

    def __init__(self, target, config: MeasureConfig | None = None, batch_size: int = 8) -> None:
        self.target = target
        self.resolved = resolve_target(target)
        self.target_rec = self.resolved.record
        self.config = config or MeasureConfig()
        self.search = SearchConfig(batch_size=batch_size, confirm_top=0)
        self.db = None

    def __enter__(self) -> OurTuner:
        self._tuner = Tuner(self.resolved, self.config, self.search).__enter__()
        return self

    @property
    def measurer(self):
        """The current database's batch measurer (``measure``, ``remeasure``, ``release``)."""
        return self._tuner.measurer

    def open(self, db_url: str) -> OurTuner:
        """Tune into the database at ``db_url`` from now on (the previous one is closed)."""
        self._close_db(SessionStatus.FINISHED)
        self.db = open_database(db_url)
        self.session_id = self.db.start_session({"bench": True}, "bench", "bench")
        self._tuner.open(self.db, self.session_id)
        return self

    def close_db(self) -> None:
        """End the session and close the current database (``open`` another before tuning again)."""
        self._close_db(SessionStatus.FINISHED)

    def _close_db(self, status: SessionStatus) -> None:
        if self.db is not None:
            self.measurer.release()
            self.db.finish_session(self.session_id, status)
            self.db.close()
            self.db = None

    def __exit__(self, *exc) -> None:
        try:
            self._close_db(SessionStatus.FINISHED if exc[0] is None else SessionStatus.FAILED)
        finally:
            self._tuner.__exit__(*exc)

    def trainer(self, warm: bool) -> ModelTrainer:
        """A cost-model trainer: from the database's newest model for this target when ``warm``, else untrained."""
        model = load_warm_model(self.db, self.target_rec.target_hash) if warm else None
        if warm and model is None:
            raise RuntimeError("no stored cost model for this target to start warm from")
        return ModelTrainer(model)

    def tune(self, kernel: Kernel, trials: int, trainer: ModelTrainer, seed: int = 0, keep: bool = False
             ) -> list[Trial]:
        """Tune ``kernel`` with ``trials`` measurements; returns them in the order measured.

        The built libraries of its successful candidates are deleted at the end,
        or with ``keep`` kept for re-measurements until ``self.measurer.release()``.
        """
        wh = kernel.workload.workload_hash
        space = ScheduleSpace(kernel.func, wh, self.target, seed=seed)
        done: list[tuple[CandidateRecord, MeasureRecord]] = []
        self._tuner.search = dataclasses.replace(self.search, trials=trials, seed=seed)
        self._tuner.tune({wh: kernel}, {wh: space}, trainer, keep_builds=keep,
                         on_measured=lambda _k, batch, records: done.extend(trial_pairs(batch, records)))
        return [Trial(c.trace_json, r.median_s if r.status == MeasureStatus.OK else None) for c, r in done]

    def save_model(self, trainer: ModelTrainer) -> int | None:
        """Store the trainer's model in the database (what a later warm start loads)."""
        return save_model(self.db, self.target_rec.target_hash, trainer)


def metaschedule_builder(target, timeout_s: float = 600.0):
    """MetaSchedule's ``LocalBuilder`` whose processes parse only ``target``'s tensor intrinsics.

    Its build processes otherwise import every backend's intrinsics (about 24 s of CPU
    each, and it starts new ones every batch); the initializer registers the target
    architecture's first (:func:`measure.tvmapi.register_tensor_intrinsics`). Builds,
    search and measurement are untouched. The timeout is raised from its 30 s default
    for loaded machines.
    """
    from measure.tvmapi import ms, register_tensor_intrinsics

    return ms.builder.LocalBuilder(timeout_sec=timeout_s,
                                   initializer=functools.partial(register_tensor_intrinsics, target))


def metaschedule_tune(kernel: Kernel, trials: int, target, work_dir: str, seed: int = 0,
                      trials_per_iter: int = 64, build_timeout_s: float = 600.0) -> list[Trial]:
    """Tune ``kernel`` with MetaSchedule's ``tune_tir`` (its defaults); returns its trials in the order measured.

    The order comes from ``database_tuning_record.json``, which MetaSchedule
    appends to as measurements arrive. The builder is :func:`metaschedule_builder`;
    search and measurement are untouched.
    """
    from measure.tvmapi import ms

    shutil.rmtree(work_dir, ignore_errors=True)
    mod = tvm.IRModule({"main": kernel.func.with_attr("global_symbol", "main")})
    ms.tune_tir(mod, target, work_dir, max_trials_global=trials, num_trials_per_iter=min(trials_per_iter, trials),
                builder=metaschedule_builder(target, build_timeout_s), seed=seed)
    out = []
    with open(os.path.join(work_dir, "database_tuning_record.json"), encoding="utf-8") as fh:
        for line in fh:
            _, record = json.loads(line)
            trace, run_secs = record[0], record[1]
            ok = run_secs and all(0 < s < 1e9 for s in run_secs)
            out.append(Trial(json.dumps(trace), float(np.median(run_secs)) if ok else None))
    return out


def compile_trace(kernel: Kernel, trace_json: str, target):
    """The kernel scheduled by ``trace_json`` (empty trace: unscheduled), built for ``target``; its ``main``."""
    mod = apply_trace(kernel.func.with_attr("global_symbol", "main"), trace_json)
    return tvm.compile(mod, target=target)["main"]


class MatmulData:
    """Random float32 inputs for a shape: ``variants`` weight copies so a timing sweep streams weights from memory."""

    def __init__(self, shape: MatmulShape, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.shape = shape
        self.variants = variants_for(4 * shape.k * shape.n, max(64 << 20, 2 * llc_bytes()))
        self.x = rng.uniform(-1, 1, (shape.m, shape.k)).astype("float32")
        self.ws = [rng.uniform(-1, 1, (shape.k, shape.n)).astype("float32") for _ in range(self.variants)]
        self.expected = self.x @ self.ws[0]


def tvm_call(func, data: MatmulData, packed: bool = False) -> Callable[[int], object]:
    """``call(i)``: one call of a built kernel on weight ``i`` of ``data`` (checked against numpy first).

    ``packed``: the kernel reads its weight packed (:func:`packed_kernel`); the packing,
    done once per weight, is not part of the call.

    Raises
    ------
    AssertionError
        The kernel's output differs from numpy's.
    """
    dev = tvm.cpu()
    x = tvm.runtime.tensor(data.x, dev)
    ws = [tvm.runtime.tensor(pack_weight(w) if packed else w, dev) for w in data.ws]
    out = tvm.runtime.empty((data.shape.m, data.shape.n), "float32", dev)
    func(x, ws[0], out)
    np.testing.assert_allclose(out.numpy(), data.expected, rtol=1e-3, atol=1e-3)
    return lambda i: func(x, ws[i], out)


def time_tvm(func, data: MatmulData, repeat: int = 7, packed: bool = False) -> float:
    """Median seconds of one call of a built kernel (:func:`tvm_call`, :func:`bench.common.median_time`)."""
    return median_time(tvm_call(func, data, packed), data.variants, repeat)


def numpy_call(data: MatmulData) -> Callable[[int], object]:
    """``call(i)``: ``numpy.matmul`` (its BLAS) of ``data.x`` and weight ``i`` into a preallocated output."""
    out = np.empty((data.shape.m, data.shape.n), "float32")
    return lambda i: np.matmul(data.x, data.ws[i], out=out)


def torch_call(data: MatmulData) -> Callable[[int], object]:
    """``call(i)``: ``torch.matmul`` (eager, CPU) of ``data.x`` and weight ``i`` into a preallocated output."""
    import torch

    x = torch.from_numpy(data.x)
    ws = [torch.from_numpy(w) for w in data.ws]
    out = torch.empty((data.shape.m, data.shape.n), dtype=torch.float32)
    return lambda i: torch.matmul(x, ws[i], out=out)

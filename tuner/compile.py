"""Compile a program with its tuned kernels, run it on a worker, check and time it.

The build follows MetaSchedule's ``compile_relax`` order: fuse, put the tuned
kernels in place of the fused ones, then TVM's own lowering and finalisation.
Work on weights alone (transposes, the concatenated weights of merged GEMMs) is
moved out of ``main`` into a function run once when the program is loaded
(:func:`prepare_weights`), as deployment does with its weights.
The artifact is a shared library (``export_library``); it is uploaded to a
worker through the RPC tracker and run there with the Relax virtual machine.
"""

from __future__ import annotations

import gc
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax
from tvm import rpc as tvm_rpc

from measure import MeasureConfig, TrackerAddress
from measure.held_tensors import HeldTensors
from measure.tvmapi import lower_and_finalize_passes, release_vm_memory

TRANSFORM_WEIGHTS = "transform_weights"
"""Name of the function that prepares the weights of a program built from :func:`prepare_weights`."""
_LIFTED = "main_transform_params"
RUN_ONCE = frozenset({TRANSFORM_WEIGHTS, _LIFTED})
"""Functions of a prepared program that run once when it is loaded, not on every call."""


PROGRAM_TIMING_BUDGET_S = 30.0
"""Seconds a program's calls in its timed repeats may take in all, as its first (untimed) run
foretells them. TVM's untuned default build of a real layer takes seconds to tens of seconds
per call, so ``--repeat`` calls of it would take minutes for a reference nobody needs to the
millisecond; a tuned layer takes milliseconds a call and keeps every repeat (see
docs/decisions.md, "Timing budget for a whole program")."""
MIN_PROGRAM_REPEATS = 3


def program_repeats(config: MeasureConfig, first_run_s: float, budget_s: float = PROGRAM_TIMING_BUDGET_S) -> int:
    """Repeats to time a program whose first run took ``first_run_s`` seconds.

    ``config.repeat``, unless that many repeats of ``config.number`` calls would take
    longer than ``budget_s``; then as many as fit, at least ``MIN_PROGRAM_REPEATS`` and
    never more than ``config.repeat``. Only the program's own time counts: repeats that
    last long because ``config.min_repeat_ms`` asks it are what the user asked for.
    """
    per_repeat = first_run_s * config.number
    if per_repeat * config.repeat <= budget_s:
        return config.repeat
    return min(config.repeat, max(MIN_PROGRAM_REPEATS, math.floor(budget_s / per_repeat)))


class VerificationError(RuntimeError):
    """A compiled program whose outputs differ from the reference.

    ``max_abs_error`` is the largest absolute difference found (None when the outputs'
    count or shapes differ, so that no element-wise comparison was made).
    """

    def __init__(self, message: str, max_abs_error: float | None = None) -> None:
        super().__init__(message)
        self.max_abs_error = max_abs_error


def prepare_weights(mod: tvm.IRModule) -> tvm.IRModule:
    """Move the computations that read weights only out of ``main`` (TVM's ``LiftTransformParams``).

    Weights are the parameters of ``main`` from its ``num_input`` attribute on. The
    lifted work goes into ``transform_weights(*weights)``, which returns the tuple of
    prepared weights; the new ``main`` takes the activations, then the prepared weights.

    The module is returned unchanged when ``main`` has no ``num_input`` or no work on
    weights alone; :func:`prepared_inputs` tells which.
    """
    func = mod["main"]
    num_input = func.attrs.get("num_input") if func.attrs is not None else None
    if num_input is None or int(num_input) >= len(func.params):
        return mod
    lifted = relax.transform.LiftTransformParams()(mod)
    if _LIFTED not in [gv.name_hint for gv in lifted.get_global_vars()]:
        return mod
    transform = lifted.get_global_var(_LIFTED)
    bb = relax.BlockBuilder(lifted)
    weights = [relax.Var(p.name, p.ty) for p in func.params[int(num_input):]]
    with bb.function(TRANSFORM_WEIGHTS, weights):
        prepared = bb.emit(relax.Call(transform, [relax.Tuple(weights)]))
        bb.emit_func_output(prepared)
    return bb.get()


def prepared_inputs(mod: tvm.IRModule) -> int | None:
    """The number of activation inputs of a module from :func:`prepare_weights` whose
    weights were lifted (its ``main``'s ``num_input``), else None."""
    if TRANSFORM_WEIGHTS not in [gv.name_hint for gv in mod.get_global_vars()]:
        return None
    return int(mod["main"].attrs["num_input"])


def build_tuned(fused: tvm.IRModule, scheduled: dict[str, tvm.IRModule], target: tvm.target.Target):
    """Build a fused program with ``scheduled[kernel name]["main"]`` in place of each named kernel.

    Kernels not in ``scheduled`` keep TVM's default (unscheduled) form.
    Returns a ``relax.Executable``.
    """
    mod = fused
    for gv in list(mod.functions.keys()):
        if gv.name_hint in scheduled:
            func = scheduled[gv.name_hint]["main"].without_attr("global_symbol")
            mod = _with_func(mod, gv, func)
    passes = lower_and_finalize_passes(target)

    @tvm.transform.module_pass(opt_level=3)
    def _pipeline(m, _ctx):
        return tvm.transform.Sequential(passes)(m)

    with target, tvm.transform.PassContext(opt_level=3):
        return relax.build(mod, target=target, relax_pipeline=_pipeline)


def _with_func(mod: tvm.IRModule, gv, func) -> tvm.IRModule:
    new = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    new[gv] = func
    return new


def build_default(mod: tvm.IRModule, target: tvm.target.Target):
    """TVM's default, untuned build of a Relax program (``relax.build`` with its default pipeline)."""
    with target:
        return relax.build(mod, target=target)


def export(executable, path: str) -> str:
    """Write an executable as a shared library at ``path``; returns the path."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    executable.export_library(path)
    return path


@dataclass(frozen=True)
class ProgramRun:
    """Outputs of one run of a program and its repeat times in seconds."""

    outputs: tuple[np.ndarray, ...]
    times_s: tuple[float, ...]

    @property
    def median_s(self) -> float:
        """Median repeat time in seconds."""
        return float(np.median(self.times_s))


def run_on_worker(
    artifacts: list[str], args: list[np.ndarray], tracker: TrackerAddress, key: str, config: MeasureConfig,
    num_inputs: list[int | None] | None = None, between: Callable[[int], None] | None = None,
) -> list[ProgramRun]:
    """Upload each artifact to one worker of ``key``, run ``main(*args)`` once for its outputs, then time it.

    All artifacts run in one session on the same device. Outputs come from a
    separate first run of each, whose wall time (round trip included) bounds the
    repeats of a slow program (:func:`program_repeats`). The timing is
    interleaved, so that a machine whose load changes meanwhile slows every
    program alike: in round ``r`` each program still owed a repeat is timed for
    one repeat (``time_evaluator`` with the protocol's ``number`` and
    ``min_repeat_ms``, after its one untimed call), one program after the other,
    then ``between(r)`` runs in this process (the caller times PyTorch eager
    there). ``num_inputs[i]``, when not None, says artifact ``i`` was built from
    :func:`prepare_weights` with that many activations: its ``transform_weights``
    runs once on ``args[n:]`` before, and outside, the timing.

    Memory on the worker: ``args`` are uploaded once, held by name in the
    session (:class:`measure.held_tensors.HeldTensors`) and given to every VM
    without a copy; each prepared program adds its prepared weights (one more
    copy of the weights), and the intermediates of its transform are freed at
    once. Once every program is loaded, the uploaded weights are dropped, so where
    every program is prepared the worker holds the prepared copies only: at most
    two copies of the weights while the last one is prepared.
    """
    session = tvm_rpc.connect_tracker(tracker.host, tracker.port).request(
        key, session_timeout=config.timeout_s * 10
    )
    splits = num_inputs or [None] * len(artifacts)
    try:
        held = HeldTensors(session)
        uploaded = [f"arg{i}" for i in range(len(args))]
        for name, a in zip(uploaded, args, strict=True):
            held.upload(name, a)
        loaded = [_load_program(session, held, a, uploaded, config, n, f"p{i}_")
                  for i, (a, n) in enumerate(zip(artifacts, splits, strict=True))]
        held.drop(uploaded)  # the VMs hold what they use: the weights as given only if one is not prepared
        times: list[list[float]] = [[] for _ in loaded]
        for r in range(max(p.repeat for p in loaded)):
            for p, t in zip(loaded, times):
                if r < p.repeat:
                    t.append(float(p.timer("main").results[0]))
            if between is not None:
                between(r)
        for p in loaded:
            session.remove(p.name)
        return [ProgramRun(p.outputs, tuple(t)) for p, t in zip(loaded, times)]
    finally:
        del session
        gc.collect()  # the RPC session (and the worker it holds) ends when its last reference goes


@dataclass
class _Loaded:
    """A program loaded on the worker: its uploaded file name, first outputs, repeats owed and timer."""

    name: str
    outputs: tuple[np.ndarray, ...]
    repeat: int
    timer: Callable
    vm: object


def _load_program(session, held: HeldTensors, artifact: str, names: list[str], config: MeasureConfig,
                  num_inputs: int | None, prefix: str) -> _Loaded:
    """Load ``artifact`` on the worker with its arguments (held there as ``names``), run it once, set its timer.

    A prepared program's weights are held as ``prefix0``, ``prefix1``, ... until its VM has them.
    """
    name = os.path.basename(artifact)
    session.upload(artifact, name)
    dev = session.cpu()
    lib = session.load_module(name)
    if num_inputs is not None:  # in a VM of its own, which drops the weights as given when it goes
        prepare = relax.VirtualMachine(lib, dev)
        held.set_input(prepare, TRANSFORM_WEIGHTS, names[num_inputs:])
        prepare.invoke_stateful(TRANSFORM_WEIGHTS)
        prepared = held.keep_outputs(prepare, TRANSFORM_WEIGHTS, prefix)
        del prepare
        gc.collect()
        release_vm_memory(session)  # the transform's intermediates, as large as the weights
        names = names[:num_inputs] + prepared
    vm = relax.VirtualMachine(lib, dev)
    held.set_input(vm, "main", names)
    if num_inputs is not None:
        held.drop(names[num_inputs:])
    start = time.perf_counter()
    vm.invoke_stateful("main")
    outputs = tuple(a.numpy() for a in _flatten(vm.get_outputs("main")))
    repeat = program_repeats(config, time.perf_counter() - start)
    timer = vm.time_evaluator("invoke_stateful", dev, number=config.number, repeat=1,
                              min_repeat_ms=config.min_repeat_ms)
    return _Loaded(name, outputs, repeat, timer, vm)


def local_program(artifact: str, args: list[np.ndarray], num_inputs: int) -> Callable[[], list]:
    """A contender build (:mod:`tuner.contender`) of a program's artifact, run in this process on ``tvm.cpu()``.

    ``args`` are the activations (``num_inputs`` of them) then the weights, as
    :func:`run_on_worker` takes them; when the program has a ``transform_weights``
    function (:func:`prepare_weights`) it runs once here, outside the calls. The
    returned call runs ``main`` once and returns its outputs as TVM tensors (no copy).
    """
    dev = tvm.cpu()
    vm = relax.VirtualMachine(tvm.runtime.load_module(artifact), dev)
    tensors = [tvm.runtime.tensor(np.ascontiguousarray(a), device=dev) for a in args]
    if vm.module.implements_function(TRANSFORM_WEIGHTS):
        vm.set_input(TRANSFORM_WEIGHTS, *tensors[num_inputs:])
        vm.invoke_stateful(TRANSFORM_WEIGHTS)
        tensors = tensors[:num_inputs] + list(vm.get_outputs(TRANSFORM_WEIGHTS))
    vm.set_input("main", *tensors)

    def call() -> list:
        vm.invoke_stateful("main")
        return _flatten(vm.get_outputs("main"))

    return call


def _flatten(value) -> list:
    if isinstance(value, tuple | list):
        return [x for item in value for x in _flatten(item)]
    return [value]


def verify(outputs: tuple[np.ndarray, ...], reference: tuple[np.ndarray, ...], rtol: float = 1e-3,
           atol: float = 1e-3) -> float:
    """Max absolute error of ``outputs`` against ``reference``.

    Raises
    ------
    VerificationError
        When the output count differs or any element is outside ``atol + rtol * |ref|``.
    """
    if len(outputs) != len(reference):
        raise VerificationError(f"program returned {len(outputs)} outputs, the reference has {len(reference)}")
    worst = 0.0
    for i, (got, ref) in enumerate(zip(outputs, reference)):
        if got.shape != ref.shape:
            raise VerificationError(f"output {i} has shape {got.shape}, the reference {ref.shape}")
        err = float(np.max(np.abs(got.astype(np.float64) - ref))) if got.size else 0.0
        if not np.allclose(got, ref, rtol=rtol, atol=atol):
            raise VerificationError(f"output {i} differs from the reference (max abs error {err:.3g})", err)
        worst = max(worst, err)
    return worst

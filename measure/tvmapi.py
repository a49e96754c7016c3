"""The one door to TVM APIs that change between releases (0.27 names today).

Every other module (``tuner``, ``extract``, ``measure``, ``database``, ``bench`` and
the tests) reaches unstable TVM API through this module, so that the next rename
of a module or class (``tir`` -> ``tirx``/``s_tir``, string targets -> JSON targets)
is a one-file change. ``tests/measure/test_tvm_door.py`` fails when a module elsewhere
names one of :data:`UNSTABLE_MODULES`. Methods of the objects handed out are called
directly (``Schedule.get_sblock``, ``Trace.as_json``): a rename of those still
reaches their callers.

What belongs here:

- the unstable modules, under stable names: ``tirx`` (TIR expressions, statements,
  ``const``, ``Select``, ``ForKind``, ``analysis``), ``s_tir`` (schedules and their
  analyses), ``ms`` (MetaSchedule) and ``T`` (the TVMScript namespace, for
  ``@T.prim_func``);
- the classes callers name: ``PrimFunc``, ``Schedule``, ``Trace``, ``ArgInfo``,
  ``JSONDatabase``, ``TuningRecord``;
- ``tvm_ffi``'s object functions: :func:`structural_hash`, :func:`structural_equal`,
  :func:`ffi_convert`;
- helpers whose TVM calls moved or changed shape between releases (the kernel hash
  that keys workloads, targets, traces, flops, op kinds, tensor intrinsics, the
  MetaSchedule builder, Relax pipelines).

Stable API (``tvm.IRModule``, ``tvm.relax``, ``tvm.runtime``, ``tvm.target``,
``tvm.te``, ``tvm.ir``) is used where it is needed, not through here.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import sys
import types
from typing import Any

import tvm
import tvm_ffi
from tvm import s_tir, tirx  # noqa: F401  (re-exported)
from tvm.s_tir import meta_schedule as ms  # noqa: F401  (re-exported)
from tvm.s_tir.meta_schedule.arg_info import ArgInfo  # noqa: F401  (re-exported)
from tvm.s_tir.meta_schedule.database import JSONDatabase, TuningRecord  # noqa: F401  (re-exported)
from tvm.s_tir.schedule import Schedule, Trace
from tvm.script import tirx as T  # noqa: F401, N812  (re-exported: TVMScript's ``T``)

#: Modules of TVM that only this file may import or name (the test of the door scans for them).
UNSTABLE_MODULES = ("tvm.s_tir", "tvm.tirx", "tvm.script.tirx", "tvm_ffi")

#: The package of tensor intrinsics MetaSchedule registers (see :func:`register_tensor_intrinsics`).
TENSOR_INTRIN_PACKAGE = "tvm.s_tir.tensor_intrin"

PrimFunc = tirx.PrimFunc


def structural_hash(obj: Any, *, map_free_vars: bool = False) -> int:
    """TVM's structural hash of any TVM object (an ``IRModule``, a function, a type, an array).

    With ``map_free_vars``, free variables hash by position, not identity, so two
    terms equal up to renaming their free variables hash alike.
    """
    return tvm_ffi.structural_hash(obj, map_free_vars=map_free_vars)


def structural_equal(lhs: Any, rhs: Any, *, map_free_vars: bool = False) -> bool:
    """TVM's structural equality of two TVM objects (``map_free_vars`` as in :func:`structural_hash`)."""
    return bool(tvm_ffi.structural_equal(lhs, rhs, map_free_vars=map_free_vars))


def ffi_convert(value: Any) -> Any:
    """A Python value (lists, dicts, numbers, strings, TVM objects) as a TVM object."""
    return tvm_ffi.convert(value)


def kernel_hash(func: PrimFunc) -> str:
    """Hex structural hash of a PrimFunc with its ``global_symbol`` dropped.

    Two kernels that differ only in name hash alike, so the same kernel from two
    models is one workload.
    """
    return f"{structural_hash(func.without_attr('global_symbol')):016x}"


def estimate_flops(func: PrimFunc) -> float:
    """Floating-point operations of one call of ``func`` (multiply-add counts 2).

    From TVM's ``s_tir.analysis.estimate_tir_flops``.
    """
    return float(s_tir.analysis.estimate_tir_flops(tvm.IRModule({"main": func})))


def op_kind(func: PrimFunc) -> str:
    """The kind of a kernel, from its blocks alone (no name needed).

    ``attention`` when it has both a max-reduction and a sum-reduction (a softmax);
    else ``matmul`` when a reduction block updates ``acc + a * b`` with ``a`` and
    ``b`` read from two different buffers (GEMM, GEMV, batched attention scores);
    else ``reduction`` when any block has a reduction axis (RMS norm, mean);
    else ``elementwise``. Casts around the operands are looked through.
    """
    seen = set()
    sch = Schedule(func)
    for rv in sch.get_child_blocks(sch.get_sblock("root")):
        seen |= _reduction_kinds(sch.get(rv))
    if {"max", "sum"} <= seen:
        return "attention"
    if "matmul" in seen:
        return "matmul"
    return "reduction" if seen else "elementwise"


def _reduction_kinds(block) -> set[str]:
    """What a block reduces: {} (no reduction axis), {"reduce"}, {"max"}, {"sum"} or {"sum", "matmul"}."""
    if not any(iv.iter_type == tirx.IterVar.CommReduce for iv in block.iter_vars):
        return set()
    store, prim = block.body, tvm.ir.prim.expr
    if not isinstance(store, tirx.stmt.BufferStore):
        return {"reduce"}
    if isinstance(store.value, prim.Max):
        return {"max"}
    if not isinstance(store.value, prim.Add):
        return {"reduce"}

    def bare(e):
        while isinstance(e, prim.Cast):
            e = e.value
        return e

    def load(e):  # the buffer a load reads (TVM 0.27: TensorLoad.source), else None
        return e.source if isinstance(e, tvm.ir.expr.TensorLoad) else None

    for acc, term in ((store.value.a, store.value.b), (store.value.b, store.value.a)):
        acc, term = bare(acc), bare(term)
        if load(acc) is not None and load(acc).same_as(store.buffer) and isinstance(term, prim.Mul):
            a, b = load(bare(term.a)), load(bare(term.b))
            if a is not None and b is not None and not a.same_as(b):
                return {"sum", "matmul"}
    return {"sum"}


def host_cpu() -> str:
    """LLVM's name for this machine's CPU (for example ``znver5``)."""
    return str(tvm.target.codegen.llvm_get_system_cpu())


def make_target(spec: str | dict) -> tvm.target.Target:
    """A ``tvm.target.Target`` from a JSON string, a dict, or a bare kind (``llvm``).

    Raises
    ------
    ValueError
        When TVM refuses the target (the message names it).
    """
    if isinstance(spec, str):
        text = spec.strip()
        if not text.startswith("{") and (" " in text or "-" in text.split(" ")[0][:1]):
            raise ValueError(
                f"target strings like {text!r} are refused by TVM 0.27: give JSON, "
                'e.g. \'{"kind": "llvm", "mcpu": "znver4", "num-cores": 2}\''
            )
        try:
            spec = json.loads(text) if text.startswith("{") else {"kind": text}
        except json.JSONDecodeError as err:
            raise ValueError(f"target is not valid JSON: {err}") from None
    if not isinstance(spec, dict) or "kind" not in spec:
        raise ValueError(f"target must be a JSON object with a \"kind\", got {json.dumps(spec)}")
    if spec["kind"] == "llvm" and "num-cores" not in spec:
        spec = dict(spec, **{"num-cores": os.cpu_count() or 1})  # MetaSchedule's CPU rules need it
    for part in (spec, spec.get("host")):
        if isinstance(part, dict):
            _check_cpu_target(part)
    try:
        return tvm.target.Target(spec)
    except Exception as err:  # TVM raises several error types for a bad target
        reason = str(err).splitlines()[-1]
        unknown = re.match(r"Unknown config option '([^']+)'\. Known options: ([^.]*)\.", reason)
        if unknown:
            key = unknown.group(1)
            raise ValueError(f"unknown target key {key!r} (value {json.dumps(_find_key(spec, key))}) for kind "
                             f"{spec['kind']!r}; known keys: {unknown.group(2)}") from None
        raise ValueError(f"invalid target {json.dumps(spec)}: {reason}") from None


def _check_cpu_target(spec: dict) -> None:
    """Refuse what TVM accepts and LLVM or MetaSchedule would only trip on later: non-positive
    ``num-cores``, an ``mcpu`` LLVM does not know for the target's triple (TVM would build for
    a generic CPU and the records would be filed under a target that does not exist)."""
    if "num-cores" in spec:
        cores = spec["num-cores"]
        if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
            raise ValueError(f"target key 'num-cores' must be a positive integer, got {json.dumps(cores)}")
    if spec.get("kind") == "llvm" and "mcpu" in spec:
        cpu, triple = spec["mcpu"], spec.get("mtriple") or str(tvm.target.codegen.llvm_get_system_triple())
        if not isinstance(cpu, str) or not tvm.target.codegen.llvm_is_valid_cpu(cpu, str(triple)):
            raise ValueError(f"target key 'mcpu': LLVM knows no CPU {json.dumps(cpu)} for triple {triple} "
                             f"(this machine's is {host_cpu()!r})")


def _find_key(spec: dict, key: str):
    """The value of ``key`` in a target spec or its host's, for an error message."""
    host = spec.get("host")
    return spec.get(key, host.get(key) if isinstance(host, dict) else None)


def target_json(target: tvm.target.Target) -> str:
    """Canonical JSON of a target (sorted keys), the form stored in the database."""
    return json.dumps(_plain(target.export()), sort_keys=True, separators=(",", ":"))


def _plain(obj):
    """TVM containers and IntImm/FloatImm as plain Python JSON values."""
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if isinstance(obj, dict) or type(obj).__name__ == "Map":
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple) or type(obj).__name__ == "Array":
        return [_plain(x) for x in obj]
    if hasattr(obj, "value"):
        return obj.value
    return str(obj)


def trace_to_json(trace: Trace) -> str:
    """Canonical JSON text of a schedule trace, postprocessing instructions included."""
    return json.dumps(_plain(trace.as_json(remove_postproc=False)), sort_keys=True, separators=(",", ":"))


def apply_trace(func: PrimFunc, trace_json: str) -> tvm.IRModule:
    """Replay a trace (as stored) on a PrimFunc; the empty trace gives the unscheduled kernel.

    Returns an IRModule with the scheduled function as ``main``.
    """
    sch = Schedule(tvm.IRModule({"main": func}))
    Trace.apply_json_to_schedule(json.loads(trace_json), sch)
    return sch.mod


def load_trace(func: PrimFunc, trace_json: str) -> Trace:
    """The ``Trace`` object of a stored trace (replayed on ``func``)."""
    sch = Schedule(tvm.IRModule({"main": func}))
    Trace.apply_json_to_schedule(json.loads(trace_json), sch)
    return sch.trace


def mutate_trace(func: PrimFunc, trace: Trace, mutator, postprocs, seed: int) -> Schedule | None:
    """One MetaSchedule mutation of a trace of ``func``, postprocessed as evolutionary search does.

    ``mutator`` (a ``ms.Mutator`` initialised by a tune context) rewrites one
    sampling decision of ``trace`` with random state ``seed`` (a positive int);
    the mutated trace is replayed without its postprocessing instructions, then
    ``postprocs`` are applied. Returns the new schedule (its ``trace`` includes
    the postprocessing), or None when the mutator, the replay or a postprocessor
    refuses.
    """
    new = ms._ffi_api.MutatorApply(mutator, trace, seed)
    if new is None:
        return None
    out = Schedule(tvm.IRModule({"main": func}))
    try:
        new.apply_to_schedule(out, remove_postproc=True)
        return out if all(p.apply(out) for p in postprocs) else None
    except (RuntimeError, ValueError):  # ScheduleError and TVM errors: a mutated decision the primitives refuse
        return None


def lower_and_finalize_passes(target: tvm.target.Target) -> list:
    """Relax's dataflow-lowering and finalisation passes for ``target`` (after fusion).

    TVM 0.27's dispatcher misses the CPU backend's functions (they live in
    ``relax.backend.cpu_generic.pipeline``); fall back to that module for llvm.
    """
    from tvm.relax import pipeline as relax_pipeline

    try:
        return list(relax_pipeline.dataflow_lower_passes(target)) + list(relax_pipeline.finalize_passes(target))
    except AttributeError:
        from tvm.relax.backend.cpu_generic import pipeline as cpu_pipeline

        return list(cpu_pipeline.dataflow_lower_passes(target)) + list(cpu_pipeline.finalize_passes(target))


def build_and_export(mod: tvm.IRModule, target: tvm.target.Target) -> str:
    """Compile ``mod`` for ``target`` as MetaSchedule's local builder does, and export it.

    Returns the path of the exported kernel library (a tar in a fresh temporary
    directory). Call :func:`register_tensor_intrinsics` first.
    """
    from tvm.s_tir.meta_schedule.builder.local_builder import (
        default_build,
        default_export,
    )

    return default_export(default_build(mod, target, None))


_CPU_INTRINSICS = {"x86": ("x86", "i386", "i686"), "arm_cpu": ("aarch64", "arm"), "riscv_cpu": ("riscv",)}


def release_vm_memory(session=None) -> None:
    """Free the memory the Relax virtual machine's pooled allocator keeps for reuse.

    In this process, or with ``session`` (a TVM RPC session) in the worker's.

    The VM allocates its tensors (a program's intermediates and outputs) from a
    per-device pool that keeps freed buffers for the next call, across VMs: after a
    layer has run, its intermediates stay allocated, as large as its weights where
    ``main`` transposes them. Buffers still in use are not touched. The global
    function's name is TVM's (``src/runtime/memory/memory_manager.cc``).
    """
    name = "vm.builtin.memory_manager.clear"
    (tvm.get_global_func(name) if session is None else session.get_function(name))()


def _cpu_intrinsic_modules(target: tvm.target.Target) -> list[str]:
    """The ``tensor_intrin`` modules for an ``llvm`` target's architecture (its ``mtriple``).

    An unknown or missing triple gets all three CPU modules.
    """
    triple = str(target.attrs.get("mtriple", "")).lower()
    chosen = [module for module, prefixes in _CPU_INTRINSICS.items() if triple.startswith(prefixes)]
    return chosen or list(_CPU_INTRINSICS)


def register_tensor_intrinsics(target: tvm.target.Target) -> None:
    """Register the tensor intrinsics MetaSchedule may use for ``target``, and no others.

    ``tvm.s_tir.meta_schedule.TuneContext`` imports ``tvm.s_tir.tensor_intrin``,
    whose package import parses every intrinsic of every backend from TVMScript
    (CUDA's alone are hundreds): tens of seconds of CPU per process. For an ``llvm``
    target this registers the package without running its ``__init__`` and imports
    only the module of the target's architecture (its ``mtriple``; all three CPU
    modules when the triple is unknown), a small share of that time (see
    docs/decisions.md, "Only the target architecture's tensor intrinsics"), so the
    later import in ``TuneContext`` is free; for any other target kind it imports
    the whole package as TVM does. Idempotent; call it before creating a
    ``TuneContext``.
    """
    name = TENSOR_INTRIN_PACKAGE
    if target.kind.name != "llvm":
        importlib.import_module(name)
        return
    if name not in sys.modules:
        spec = importlib.util.find_spec(name)
        package = types.ModuleType(name)
        package.__path__ = list(spec.submodule_search_locations)
        package.__package__ = name
        package.__spec__ = spec
        sys.modules[name] = package
    for module in _cpu_intrinsic_modules(target):
        importlib.import_module(f"{name}.{module}")

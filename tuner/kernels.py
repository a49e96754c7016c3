"""From a Relax program to kernels: fusion, workloads, call counts and references.

A program is lowered with TVM's standard passes (LegalizeOps, AnnotateTIROpPattern,
FuseOps, FuseTIR); each resulting PrimFunc is a kernel, keyed by its structural
hash (the workload). The reference outputs of a kernel come from its unscheduled
form compiled for the host and run on fixed random inputs.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax

from database import WorkloadRecord
from measure import KernelReference
from measure.tvmapi import ArgInfo, PrimFunc, estimate_flops, kernel_hash, op_kind

from .compile import RUN_ONCE


@dataclass(frozen=True)
class Kernel:
    """One kernel of a program: its PrimFunc, workload record and calls per program run."""

    name: str
    func: PrimFunc
    workload: WorkloadRecord
    calls: int
    n_outputs: int


def lower_to_kernels(mod: tvm.IRModule) -> tvm.IRModule:
    """Legalize and fuse a Relax program; the result's PrimFuncs are its kernels."""
    passes = tvm.ir.transform.Sequential(
        [
            relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(),
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
            relax.transform.DeadCodeElimination(),
        ]
    )
    return passes(mod)


def _calls(mod: tvm.IRModule) -> tuple[Counter, dict[str, int]]:
    """Call counts per kernel name in a program run, and each kernel's number of outputs (from ``call_tir``).

    Kernels of the functions that prepare weights once (:data:`tuner.compile.RUN_ONCE`) are not counted.
    """
    counts: Counter = Counter()
    outputs: dict[str, int] = {}
    call_tir = tvm.ir.Op.get("relax.call_tir")

    def visit(expr):
        if isinstance(expr, relax.Call) and expr.op.same_as(call_tir):
            name = expr.args[0].name_hint
            counts[name] += 1
            out_ty = expr.ty_args[0]
            outputs[name] = len(out_ty.fields) if isinstance(out_ty, relax.TupleType) else 1

    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function) and gv.name_hint not in RUN_ONCE:
            relax.analysis.post_order_visit(func.body, visit)
    return counts, outputs


def _buffers(func: PrimFunc) -> list[tuple[tuple[int, ...], str]]:
    """(shape, dtype) of each tensor parameter, in order; TypeError on symbolic shapes."""
    return [(tuple(int(d) for d in info.shape), str(info.dtype)) for info in ArgInfo.from_prim_func(func)]


def kernels_of(fused: tvm.IRModule) -> list[Kernel]:
    """The kernels of a fused program, in name order, with their workload records.

    Raises
    ------
    ValueError
        When a kernel has symbolic shapes (only static shapes are tuned).
    """
    calls, outputs = _calls(fused)
    kernels = []
    for gv, func in sorted(fused.functions.items(), key=lambda kv: kv[0].name_hint):
        if not isinstance(func, PrimFunc) or not calls.get(gv.name_hint):
            continue
        try:
            buffers = _buffers(func)
        except TypeError:
            raise ValueError(f"kernel {gv.name_hint} has symbolic shapes; only static shapes are tuned") from None
        nbytes = sum(int(np.prod(s)) * tvm.runtime.DataType(d).bits // 8 for s, d in buffers)
        record = WorkloadRecord(
            workload_hash=kernel_hash(func),
            name=gv.name_hint,
            op_kind=op_kind(func),
            script=func.without_attr("global_symbol").script(),
            shapes_json=json.dumps([{"shape": list(s), "dtype": d} for s, d in buffers]),
            flops=estimate_flops(func),
            bytes_moved=float(nbytes),
        )
        kernels.append(Kernel(gv.name_hint, func, record, calls[gv.name_hint], outputs[gv.name_hint]))
    return kernels


def _random_input(shape, dtype: str, rng: np.random.Generator) -> np.ndarray:
    if dtype.startswith("float") or dtype.startswith("bfloat"):
        return rng.uniform(0.1, 1.0, size=shape).astype(dtype)
    if dtype in ("int8", "uint8"):  # quantized weights (extract.quant): every value is valid
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max + 1, size=shape, dtype=dtype)
    if dtype == "bool":
        return np.zeros(shape, dtype=bool)
    return np.zeros(shape, dtype=dtype)


def kernel_reference(kernel: Kernel, seed: int = 0) -> KernelReference:
    """Fixed random inputs and the unscheduled kernel's outputs on them (host llvm).

    Floating-point inputs are uniform in [0.1, 1.0) (positive, so that rsqrt and
    log stay finite); 8-bit integer inputs (quantized weights) uniform over their range;
    other integer and boolean inputs are zeros (valid indices).
    """
    rng = np.random.default_rng(seed)
    func = kernel.func
    buffers = _buffers(func)
    n_out = kernel.n_outputs
    inputs = [_random_input(s, d, rng) for s, d in buffers[: len(buffers) - n_out]]
    lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target="llvm")
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(a, device=dev) for a in inputs]
    args += [tvm.runtime.empty(s, d, device=dev) for s, d in buffers[len(buffers) - n_out :]]
    lib["main"](*args)
    outputs = [a.numpy() for a in args[len(inputs) :]]
    return KernelReference(tuple(inputs) + tuple(outputs), n_out)

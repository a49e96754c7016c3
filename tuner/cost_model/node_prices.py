"""E-node prices from the tuning database, so extraction mixes the rewrites measurements favour.

The candidate programs of a run are each one extraction strategy (all merges, all
epilogues...). Once their kernels are tuned, each GEMM-like e-node can be priced by
the kernel it lowers to: :class:`KernelNodeCost` rebuilds that kernel from the node's
shapes (the same TE and TVM fusion as :mod:`extract.ops` and
:func:`tuner.kernels.lower_to_kernels`), takes its workload hash, and returns the
kernel's chosen latency in seconds (measured, else predicted: :mod:`tuner.choose`).
Extraction then picks, node by node, what was fastest on this target: a packed GEMV
here, an epilogue-fused GEMM there.

A GEMM-like node whose kernel was not tuned (a node TVM fuses with its neighbours,
a shape or fusion no candidate had) is priced by an estimate: its kernel's roofline
latency times how far the tuned GEMM-like kernels of the run are from theirs
(:func:`calibrated_roofline`). Other nodes (elementwise ops, reshapes,
an RMSNorm prologue or a fused attention, whose epsilon or scale the shapes do not
carry) get None:
:func:`extract.extraction.default_node_cost` prices them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
from tvm import relax

from database import WorkloadRecord
from extract.ops import OPS
from tuner.kernels import Kernel, kernels_of, lower_to_kernels

from .roofline import RooflineCostModel

Shape = tuple[int, ...]


def node_kernel(op: str, out_shape: Shape | None, dtype: str | None, arg_shapes: Sequence[Shape | None]
                ) -> Kernel | None:
    """The kernel a GEMM-like e-node lowers to on its own, or None (another op, unknown shapes).

    Parameters follow :data:`extract.extraction.NodeCost` (for merged parts, the whole
    merged GEMM's shapes); the kernel and its inputs are the operator's entry in
    :data:`extract.ops.OPS` (:attr:`extract.ops.Op.kernel`).
    """
    if out_shape is None or dtype is None or any(s is None for s in arg_shapes):
        return None
    entry = OPS.get(op)
    spec = None if entry is None or entry.kernel is None else entry.kernel(arg_shapes)  # type: ignore[arg-type]
    if spec is None:
        return None
    fn, shapes = spec
    bb = relax.BlockBuilder()
    params = [relax.Var(f"a{i}", relax.TensorType(s, dtype)) for i, s in enumerate(shapes)]
    with bb.function("main", params):
        with bb.dataflow():
            value = relax.op.matmul(*params) if fn is None else bb.emit_te(fn, *params, primfunc_name_hint=op)
            out = bb.emit_output(value)
        bb.emit_func_output(out)
    kernels = kernels_of(lower_to_kernels(bb.get()))
    return kernels[0] if len(kernels) == 1 else None


def calibrated_roofline(tuned: Sequence[tuple[WorkloadRecord, float]], roofline: RooflineCostModel
                        ) -> Callable[[WorkloadRecord], float]:
    """Latency estimate for a kernel not tuned: its roofline latency times the run's calibration.

    The calibration is the median, over ``tuned`` (GEMM-like workloads and their chosen
    latencies in seconds), of latency over roofline latency, and at least 1 (1 when
    ``tuned`` is empty). The roofline is Williams, Waterman and Patterson 2009
    (:class:`tuner.cost_model.roofline.RooflineCostModel`) with the given peaks.
    """
    ratios = [s / bound for w, s in tuned if (bound := roofline.predict_latency(w)) > 0 and s > 0]
    scale = max(1.0, float(np.median(ratios))) if ratios else 1.0
    return lambda workload: scale * roofline.predict_latency(workload)


class KernelNodeCost:
    """An :data:`extract.extraction.NodeCost` from tuned kernel latencies.

    Parameters
    ----------
    seconds : Mapping[str, float]
        Latency of one call in seconds per workload hash (the kernels' chosen prices).
    estimate : callable
        Seconds for a GEMM-like kernel not in ``seconds``, from its workload record
        (:func:`calibrated_roofline`).

    Calling it returns the latency of the node's kernel (tuned, else estimated), or
    None for other nodes. Results are cached per node signature; :attr:`priced` and
    :attr:`estimated` count the signatures priced each way.
    """

    def __init__(self, seconds: Mapping[str, float], estimate: Callable[[WorkloadRecord], float]) -> None:
        self.seconds = dict(seconds)
        self.estimate = estimate
        self.priced = self.estimated = 0
        self._cache: dict[tuple, float | None] = {}

    def __call__(self, op: str, out_shape: Shape | None, dtype: str | None,
                 arg_shapes: list[Shape | None]) -> float | None:
        key = (op, out_shape, dtype, tuple(arg_shapes))
        if key not in self._cache:
            kernel = node_kernel(op, out_shape, dtype, arg_shapes)
            price = None
            if kernel is not None:
                price = self.seconds.get(kernel.workload.workload_hash)
                if price is None:
                    price = self.estimate(kernel.workload)
                    self.estimated += 1
                else:
                    self.priced += 1
            self._cache[key] = price
        return self._cache[key]


__all__ = ["KernelNodeCost", "calibrated_roofline", "node_kernel"]

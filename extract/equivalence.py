"""Numerical equivalence of a candidate program and the original.

Both modules are built for the host CPU (``llvm``) and run on the same inputs in the
Relax virtual machine; the outputs (any nesting of tuples) must have the same structure,
shapes and dtypes and agree within ``numpy.allclose`` tolerances.

The last few executables are kept (keyed by the module's structural hash), so checking
several candidates against one original builds the original once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np
import tvm
from tvm import relax

from measure.tvmapi import release_vm_memory, structural_equal, structural_hash

__all__ = ["CandidateMismatch", "check_equivalent", "run_module"]


class CandidateMismatch(Exception):
    """A candidate's outputs differ from the original's; the message is one line."""


def run_module(mod: tvm.IRModule, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Build ``mod`` for ``llvm``, run ``main`` on ``inputs`` and flatten the outputs.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module with a function ``main``.
    inputs : sequence of numpy.ndarray
        Every argument of ``main`` in signature order (activations, then weights).

    Returns
    -------
    list of numpy.ndarray
        The output tensors, tuples flattened depth first.

    The VM's pooled memory (the program's intermediates, as large as its weights
    where it transposes them) is freed before it returns, not kept for a next call.
    """
    vm = relax.VirtualMachine(_build(mod), tvm.cpu())
    outputs = _flatten(vm["main"](*[_host_tensor(a) for a in inputs]))
    del vm
    release_vm_memory()
    return outputs


_DLPACK_ALIGNMENT = 64  # bytes: TVM refuses to share a buffer at a less aligned address (tvm_ffi's FromDLPack)


def _host_tensor(array: np.ndarray) -> tvm.runtime.Tensor:
    """``array`` as a TVM tensor on the CPU, sharing its memory where TVM allows it, else a copy.

    A weight (PyTorch's memory, 64-byte aligned) is shared, not copied: a copy of
    every weight for each program run would double the weights' memory. The
    programs read their arguments only, so a read-only array is shared through a
    writeable view of it (DLPack cannot mark a buffer read-only).
    """
    array = np.require(array, requirements="C")
    # NumPy's DLPack export knows its own kinds only, not ml_dtypes' (bfloat16 weights): those are copied
    if array.ctypes.data % _DLPACK_ALIGNMENT or not array.size or array.dtype.kind not in "biufc":
        return tvm.runtime.tensor(array)
    view = array.view()
    try:
        view.flags.writeable = True
    except ValueError:  # memory that was never writeable (a read-only buffer)
        return tvm.runtime.tensor(array)
    return tvm.runtime.from_dlpack(view)


_BUILT: list[tuple[int, tvm.IRModule, Any]] = []
_BUILT_MAX = 4


def _build(mod: tvm.IRModule) -> Any:
    key = structural_hash(mod)
    for i, (k, built_mod, executable) in enumerate(_BUILT):
        if k == key and structural_equal(built_mod, mod):
            _BUILT.append(_BUILT.pop(i))
            return executable
    executable = relax.build(mod, target=tvm.target.Target({"kind": "llvm"}))
    _BUILT.append((key, mod, executable))
    del _BUILT[:-_BUILT_MAX]
    return executable


def _flatten(value: Any) -> list[np.ndarray]:
    if hasattr(value, "numpy"):
        return [value.numpy()]
    out: list[np.ndarray] = []
    for item in value:
        out.extend(_flatten(item))
    return out


def check_equivalent(
    original: tvm.IRModule,
    candidate: tvm.IRModule,
    inputs: Sequence[np.ndarray],
    rtol: float = 1e-4,
    atol: float = 1e-4,
) -> float:
    """Check that ``candidate`` computes what ``original`` computes.

    Parameters
    ----------
    original, candidate : tvm.IRModule
        Relax modules whose ``main`` functions have the same signature.
    inputs : sequence of numpy.ndarray
        Activations then weights, in ``main``'s signature order.
    rtol, atol : float
        Tolerances of ``numpy.allclose`` (candidate against original). For an output of
        a 16-bit float type ``rtol`` is at least twice its machine
        epsilon: a candidate that sums in another order may round a float16 output one
        unit in the last place the other way (a relative ``2 ** -10``).

    Returns
    -------
    float
        The largest absolute difference over all outputs (0.0 for integer outputs that
        match exactly).

    Raises
    ------
    CandidateMismatch
        Different number of outputs, shapes or dtypes, or values outside tolerance.
    """
    expected = run_module(original, inputs)
    actual = run_module(candidate, inputs)
    if len(expected) != len(actual):
        raise CandidateMismatch(
            f"candidate has {len(actual)} outputs, original has {len(expected)}"
        )
    worst = 0.0
    for i, (want, got) in enumerate(zip(expected, actual, strict=True)):
        if want.shape != got.shape or want.dtype != got.dtype:
            raise CandidateMismatch(
                f"output {i}: candidate {got.dtype}{list(got.shape)}, "
                f"original {want.dtype}{list(want.shape)}"
            )
        if want.size == 0:
            continue
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        err = float(np.nanmax(diff)) if not np.isnan(diff).all() else 0.0
        worst = max(worst, err)
        tol = max(rtol, _rounding_rtol(want.dtype))
        if not np.allclose(got, want, rtol=tol, atol=atol, equal_nan=True):
            raise CandidateMismatch(
                f"output {i} differs: max abs error {err:.3g} (rtol={tol:g}, atol={atol:g})"
            )
    return worst


def _rounding_rtol(dtype: np.dtype) -> float:
    """Twice the machine epsilon of a 16-bit float type (float16, bfloat16), else 0.

    8-bit and 4-bit floats are left out: twice their epsilon (0.25 and more) would
    switch the check off.
    """
    if dtype.itemsize != 2 or dtype.kind not in "fV":
        return 0.0
    try:
        return 2 * float(ml_dtypes.finfo(dtype).eps)
    except ValueError:  # not a float type ml_dtypes knows
        return 0.0

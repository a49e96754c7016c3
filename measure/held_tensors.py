"""Tensors a worker's session holds by name, so a program's inputs reach its VM without a copy.

Over TVM RPC a tensor passed as an argument reaches the worker as a bare
``DLTensor*`` (a pointer into the worker's tensor, without its owner), and the
Relax VM's ``set_input`` copies every such argument into a tensor of its own
(``ConvertArgToDevice`` in TVM's ``src/runtime/vm/vm.cc``: "To be extra careful,
we copy DLTensor"). A program whose weights are uploaded, then prepared by its
``transform_weights`` and then given to ``main``, would hold the weights three
times over on the worker (as uploaded, as the VM's copy, as prepared) and its
prepared weights twice.

The functions here run in the worker's session (registered by :func:`register`,
which :mod:`measure.worker` calls before it serves): tensors are created there and
kept in a table under a name, and a VM's inputs are set there from that table,
as owned tensors on the VM's own device, which the VM takes without a copy. The
session's table ends with the session's process.

The client side is :class:`HeldTensors`.
"""

from __future__ import annotations

import numpy as np
import tvm

_PREFIX = "tune.held_tensors."
_TABLE: dict[str, object] = {}


def _empty(name: str, dtype: str, *shape: int):
    tensor = tvm.runtime.empty(tuple(int(s) for s in shape), str(dtype), tvm.cpu(0))
    _TABLE[str(name)] = tensor
    return tensor


def _set_input(vm, func_name: str, *names: str) -> None:
    vm["set_input"](str(func_name), *[_TABLE[str(n)] for n in names])


def _keep_outputs(vm, func_name: str, prefix: str) -> int:
    arity = int(vm["get_output_arity"](str(func_name)))
    for i in range(arity):
        _TABLE[f"{prefix}{i}"] = vm["get_output"](str(func_name), i)
    return arity


def _drop(*names: str) -> None:
    for name in names:
        _TABLE.pop(str(name), None)


def register() -> None:
    """Register this module's functions as TVM global functions of this process (idempotent)."""
    for name, func in (("empty", _empty), ("set_input", _set_input), ("keep_outputs", _keep_outputs),
                       ("drop", _drop)):
        tvm.register_global_func(_PREFIX + name, func, override=True)


class HeldTensors:
    """Client of one RPC session's tensor table (the worker must be a :mod:`measure.worker`).

    Parameters
    ----------
    session : tvm.rpc.RPCSession
        An open session on a worker that called :func:`register`.

    Raises
    ------
    RuntimeError
        When the worker has no such table (a worker other than :mod:`measure.worker`).
    """

    def __init__(self, session) -> None:
        try:
            self._funcs = {name: session.get_function(_PREFIX + name)
                           for name in ("empty", "set_input", "keep_outputs", "drop")}
        except (AttributeError, RuntimeError, ValueError) as err:
            raise RuntimeError("the RPC worker cannot hold tensors by name: start it with "
                               "`python -m measure.worker`") from err

    def upload(self, name: str, array: np.ndarray) -> None:
        """Create the tensor ``name`` on the worker with ``array``'s shape, dtype and contents.

        No handle stays here: the table's entry is the tensor's only owner, so
        :meth:`drop` frees it once no VM holds it.
        """
        array = np.ascontiguousarray(array)
        tensor = self._funcs["empty"](name, str(array.dtype), *array.shape)
        tensor.copyfrom(array)

    def set_input(self, vm, func_name: str, names: list[str]) -> None:
        """``vm.set_input(func_name, *tensors named names)``, done on the worker: no copy.

        ``vm`` is a ``relax.VirtualMachine`` on this session's device.
        """
        self._funcs["set_input"](vm.module, func_name, *names)

    def keep_outputs(self, vm, func_name: str, prefix: str) -> list[str]:
        """Hold the outputs of ``vm``'s last ``invoke_stateful(func_name)`` as ``prefix0``, ``prefix1``, ...

        Returns their names.
        """
        arity = int(self._funcs["keep_outputs"](vm.module, func_name, prefix))
        return [f"{prefix}{i}" for i in range(arity)]

    def drop(self, names: list[str]) -> None:
        """Let the worker free the named tensors (once nothing else holds them)."""
        if names:
            self._funcs["drop"](*names)

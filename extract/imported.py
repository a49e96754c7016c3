"""What a model importer returns, and the helpers every importer shares.

:class:`ImportedModel` and :class:`ModelImportError` are what
:mod:`extract.frontend` hands its callers; the importers
(:mod:`extract.decoder`, :mod:`extract.onnx_import`) and the config checks
(:mod:`extract.config`) build them here, without importing the frontend that
dispatches to them.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import tvm

__all__ = ["ImportedModel", "ModelImportError", "first_line", "message_line", "operator_error", "readonly",
           "stable_hash"]


class ModelImportError(Exception):
    """A model could not be imported; the message is one line saying why."""


@dataclass(frozen=True)
class ImportedModel:
    """A model imported into Relax, with example data and a PyTorch twin.

    Attributes
    ----------
    mod : tvm.IRModule
        Relax module; function ``main`` takes ``inputs`` then ``params``, in that order.
        Its attribute ``num_input`` equals ``len(inputs)``.
    input_names : tuple of str
        Names of the activation parameters of ``main``, in order.
    inputs : tuple of numpy.ndarray
        Seeded random example activations, one per name in ``input_names``.
    params : tuple of numpy.ndarray
        Weights, in the order of ``main``'s parameters after the activations.  Read-only.
    source : str
        Human-readable description, e.g. ``"qwen3-0.6b prefill seq_len=128 layers=1"``.
    model_hash : str
        Hex SHA-256 identifying the model and its shapes (not the random seed).
    flops : int or None
        Floating-point operations of one call (matrix products only, a multiply-add
        counts as 2), or None when unknown.
    param_names : tuple of str
        Names of the weight parameters of ``main``, in order.
    output_names : tuple of str
        Names of the outputs of ``main``, in order.
    """

    mod: tvm.IRModule
    input_names: tuple[str, ...]
    inputs: tuple[np.ndarray, ...]
    params: tuple[np.ndarray, ...]
    source: str
    model_hash: str
    flops: int | None = None
    param_names: tuple[str, ...] = ()
    output_names: tuple[str, ...] = ()
    _torch_call: Callable[[], object] | None = field(default=None, repr=False, compare=False)
    _reference: Callable[[], tuple[np.ndarray, ...] | None] | None = field(
        default=None, repr=False, compare=False
    )

    @property
    def has_torch(self) -> bool:
        """Whether a PyTorch module of the same computation is available (not for ONNX)."""
        return self._torch_call is not None

    def torch_eager(self, repeat: int = 10, warmup: int = 2) -> list[float]:
        """Time the PyTorch eager module on ``inputs``.

        Runs under ``torch.no_grad()`` with torch's default thread count, after
        ``warmup`` untimed calls.

        Parameters
        ----------
        repeat : int
            Number of timed calls.
        warmup : int
            Number of untimed calls first.

        Returns
        -------
        list of float
            Wall-clock seconds of each timed call (take the median).

        Raises
        ------
        NotImplementedError
            When the model has no PyTorch module (an ONNX import).
        """
        if self._torch_call is None:
            raise NotImplementedError(f"no PyTorch module for {self.source}")
        if repeat < 1:
            raise ValueError(f"repeat must be positive, got {repeat}")
        import torch

        times = []
        with torch.no_grad():
            for _ in range(warmup):
                self._torch_call()
            for _ in range(repeat):
                start = time.perf_counter()
                self._torch_call()
                times.append(time.perf_counter() - start)
        return times

    def reference_outputs(self) -> tuple[np.ndarray, ...] | None:
        """Outputs of the reference implementation on ``inputs``.

        PyTorch for a transformers model, ``onnx.reference.ReferenceEvaluator`` for an
        ONNX file.

        Returns
        -------
        tuple of numpy.ndarray or None
            One array per output of ``main``, in order; None when no reference can run.
        """
        return None if self._reference is None else self._reference()


def stable_hash(*parts: object) -> str:
    """Hex SHA-256 of JSON-serialisable parts (bytes are hashed as they are)."""
    digest = hashlib.sha256()
    for part in parts:
        data = part if isinstance(part, bytes) else json.dumps(part, sort_keys=True).encode()
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (two if the first ends in a colon)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if lines[0].endswith(":") and len(lines) > 1:  # "...of node:" then the detail
        return f"{lines[0]} {lines[1]}"
    return lines[0]


# A traceback's header or frame line inside an error message (Python's or TVM's C++ frames).
_TRACEBACK_LINE = re.compile(r'\s*(Traceback\b|File "|\d+: |\[bt\] )')


def message_line(exc: BaseException) -> str:
    """An exception's whole message as one line, or its type's name when it has none.

    The message's lines are joined with spaces, traceback header and frame lines left out.
    """
    lines = [line.strip() for line in str(exc).splitlines() if line.strip() and not _TRACEBACK_LINE.match(line)]
    return " ".join(lines) if lines else type(exc).__name__


def readonly(array: np.ndarray) -> np.ndarray:
    """A read-only view of ``array``."""
    view = array.view()
    view.flags.writeable = False
    return view


def operator_error(importer: str, exc: Exception) -> ModelImportError:
    """A one-line ModelImportError for an importer failure, naming the operator if known."""
    message = message_line(exc)
    match = re.search(
        r"(?:Unsupported function types|not supported for frontend \w+:)\s*(.+)", message
    )
    if match:
        ops = re.sub(r"[\[\]']", "", match.group(1)).strip()
        return ModelImportError(f"{importer} does not support operator(s): {ops}")
    return ModelImportError(f"{importer} failed: {message}")

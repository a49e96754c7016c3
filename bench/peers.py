"""The kernel benchmark's peers: one matmul as ``torch.compile`` and ONNX Runtime build it, and numpy
without this machine's OpenBLAS settings.

Each function here is a contender build (:mod:`tuner.contender`): it runs in a
process of its own and returns a call that computes ``x @ w`` once and gives the
output. The peers are :func:`tuner.peers.build_peer` on a one-matmul module whose
weight is a parameter, so that freezing folds it in and ONNX stores it as an
initializer (ONNX Runtime's ``MatMul`` with a constant weight).
"""

from __future__ import annotations

import contextlib
import os

import numpy as np
import torch

#: OpenBLAS variables that change numpy's kernels (its core type) or blocking (its L2 size)
OPENBLAS_SETTINGS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


class MatMul(torch.nn.Module):
    """``forward(x) = x @ weight``: x float32 ``[M, K]``, weight float32 ``[K, N]`` (a parameter)."""

    def __init__(self, w: np.ndarray) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.from_numpy(np.ascontiguousarray(w)), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight


def matmul_peer(name: str, x: np.ndarray, w: np.ndarray, threads: int):
    """Peer ``name`` (:data:`tuner.options.PEERS`) of ``x @ w`` on ``threads`` threads."""
    from tuner.peers import build_peer

    return build_peer(name, MatMul(w), {"x": x}, threads)


def numpy_matmul(x: np.ndarray, w: np.ndarray):
    """``numpy.matmul`` of ``x @ w`` into a preallocated output (its BLAS, as this process's environment set it)."""
    out = np.empty((x.shape[0], w.shape[1]), np.float32)

    def call() -> tuple[np.ndarray, ...]:
        return (np.matmul(x, w, out=out),)

    return call


def openblas_settings() -> dict[str, str]:
    """The OpenBLAS settings of this environment (:data:`OPENBLAS_SETTINGS`) that are set."""
    return {k: os.environ[k] for k in OPENBLAS_SETTINGS if os.environ.get(k)}


@contextlib.contextmanager
def without_openblas_settings():
    """The OpenBLAS settings unset in ``os.environ`` inside the block (a process started there
    inherits that environment), restored after."""
    saved = openblas_settings()
    for k in saved:
        del os.environ[k]
    try:
        yield
    finally:
        os.environ.update(saved)

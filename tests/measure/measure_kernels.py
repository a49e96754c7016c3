"""Small kernels for the measure tests, as IRModules with the kernel as ``main``."""

from __future__ import annotations

import tvm
from tvm import te

from measure.tvmapi import PrimFunc, T, tirx

RPC_KEY = "measure-test"
N = 64


def _module(func: PrimFunc) -> tvm.IRModule:
    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


def matmul_module(n: int = N) -> tvm.IRModule:
    """C = A @ B on n x n float32."""
    a = te.placeholder((n, n), "float32", name="A")
    b = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), "k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return _module(te.create_prim_func([a, b, c]))


def scale_module(factor: float) -> tvm.IRModule:
    """C = A * factor on N x N float32."""
    a = te.placeholder((N, N), "float32", name="A")
    c = te.compute((N, N), lambda i, j: a[i, j] * tirx.const(factor, "float32"), name="C")
    return _module(te.create_prim_func([a, c]))


@T.prim_func
def _half_written(A: T.Buffer((N, N), "float32"), C: T.Buffer((N, N), "float32")):
    # C = A * 2 on the first half of the rows only; the other half is never written.
    for i, j in T.grid(N // 2, N):
        C[i, j] = A[i, j] * T.float32(2)


def half_written_module() -> tvm.IRModule:
    return _module(_half_written)


def slow_module(outer_bits: int = 16) -> tvm.IRModule:
    """A 2**(outer_bits + 20)-step sequential float reduction into one element.

    The default (2**36 steps) takes about a minute on a CPU; ``outer_bits=10`` about a second;
    ``outer_bits=0`` about a millisecond.
    """
    a = te.placeholder((N,), "float32", name="A")
    k1 = te.reduce_axis((0, 1 << outer_bits), "k1")
    k2 = te.reduce_axis((0, 1 << 20), "k2")
    c = te.compute((1,), lambda _: te.sum(a[(k1 + k2) % N] * a[k2 % N], axis=[k1, k2]), name="C")
    return _module(te.create_prim_func([a, c]))


def unbuildable_module() -> tvm.IRModule:
    """Uses a variable ``n`` that is no parameter: MakePackedAPI refuses it."""
    n = te.var("n")
    a = te.placeholder((N,), "float32", name="A")
    c = te.compute((N,), lambda i: a[i] * n.astype("float32"), name="C")
    return _module(te.create_prim_func([a, c]))


@T.prim_func
def _crash(A: T.Buffer((N,), "float32"), C: T.Buffer((N,), "float32")):
    # Reads a terabyte past the end of A: the process running it dies of SIGSEGV.
    for i in range(N):
        C[i] = A[T.Cast("int64", i) + T.int64(1 << 40)]


def crash_module() -> tvm.IRModule:
    """A kernel that crashes the process that runs it (an out-of-bounds read)."""
    return _module(_crash)

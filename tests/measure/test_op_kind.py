"""A kernel's op kind read from its blocks (``measure.tvmapi.op_kind``), with no name to go by."""

from __future__ import annotations

import pytest
from tvm import te, topi

from measure.tvmapi import op_kind

N = 16


def _func(*tensors):
    return te.create_prim_func(list(tensors))


def matmul(dtype="float32"):
    a = te.placeholder((N, N), dtype, name="a")
    b = te.placeholder((N, N), dtype, name="b")
    k = te.reduce_axis((0, N), name="k")
    c = te.compute((N, N), lambda i, j: te.sum(a[i, k].astype("float32") * b[j, k].astype("float32"), axis=k))
    return _func(a, b, c)


def sum_of_squares():  # RMS norm's reduction: x * x reads one buffer twice
    a = te.placeholder((N, N), "float32", name="a")
    k = te.reduce_axis((0, N), name="k")
    return _func(a, te.compute((N,), lambda i: te.sum(a[i, k] * a[i, k], axis=k)))


def row_mean():
    a = te.placeholder((N, N), "float32", name="a")
    k = te.reduce_axis((0, N), name="k")
    total = te.compute((N,), lambda i: te.sum(a[i, k], axis=k))
    return _func(a, te.compute((N,), lambda i: total[i] / N))


def row_max():
    a = te.placeholder((N, N), "float32", name="a")
    k = te.reduce_axis((0, N), name="k")
    return _func(a, te.compute((N,), lambda i: te.max(a[i, k], axis=k)))


def softmax():
    a = te.placeholder((N, N), "float32", name="a")
    return _func(a, topi.nn.softmax(a))


def silu_mul():
    a = te.placeholder((N, N), "float32", name="a")
    b = te.placeholder((N, N), "float32", name="b")
    return _func(a, b, te.compute((N, N), lambda i, j: a[i, j] * te.sigmoid(a[i, j]) * b[i, j]))


@pytest.mark.parametrize("build, kind", [
    (matmul, "matmul"),
    (lambda: matmul("float16"), "matmul"),
    (sum_of_squares, "reduction"),
    (row_mean, "reduction"),
    (row_max, "reduction"),
    (softmax, "attention"),
    (silu_mul, "elementwise"),
])
def test_op_kind_from_blocks(build, kind):
    assert op_kind(build()) == kind

"""Fixtures: a real local RPC tracker and worker, a real builder, and the built test kernels.

The tracker and worker processes start once per test session. The first build in
a builder process is slow (TVM imports its tensor intrinsics), so every kernel the
tests need is built in one batch, while the RPC processes start.
"""

from __future__ import annotations

import os
import shutil
import threading

import numpy as np
import pytest
from measure_kernels import (
    RPC_KEY,
    N,
    crash_module,
    half_written_module,
    matmul_module,
    scale_module,
    slow_module,
)

from measure import (
    Builder,
    BuildResult,
    KernelReference,
    LocalRPC,
    MeasureConfig,
    Runner,
)
from measure.tvmapi import make_target

KERNELS = {
    "matmul": matmul_module,
    "scale2": lambda: scale_module(2.0),
    "half_written": half_written_module,
    "slow": slow_module,
    "second": lambda: slow_module(outer_bits=10),
    "quick": lambda: slow_module(outer_bits=0),
    "crash": crash_module,
}


@pytest.fixture(scope="session")
def local_rpc():
    """A TVM RPC tracker and one RPC server on 127.0.0.1, registered under ``RPC_KEY``."""
    with LocalRPC(key=RPC_KEY, workers=1) as rpc:
        yield rpc


@pytest.fixture(scope="session")
def builder():
    """A one-process builder for plain llvm."""
    b = Builder(make_target({"kind": "llvm"}), workers=1, timeout_s=180)
    yield b
    b.close()


@pytest.fixture(scope="session")
def builds(builder, request) -> dict[str, BuildResult]:
    """Every kernel of ``KERNELS`` built, by name (the RPC processes start meanwhile)."""
    mods = [make() for make in KERNELS.values()]
    out: dict[str, list[BuildResult] | BaseException] = {}

    def build() -> None:
        try:
            out["results"] = builder.build(mods)
        except BaseException as err:  # re-raised in the fixture's thread
            out["results"] = err

    thread = threading.Thread(target=build)
    thread.start()
    try:
        request.getfixturevalue("local_rpc")
    finally:
        thread.join()
    if isinstance(out["results"], BaseException):
        raise out["results"]
    results = dict(zip(KERNELS, out["results"], strict=True))
    yield results
    for result in results.values():
        if result.artifact_path:
            shutil.rmtree(os.path.dirname(result.artifact_path), ignore_errors=True)


@pytest.fixture(scope="session")
def runner(local_rpc):
    """A runner with a generous timeout and few, short repeats."""
    r = Runner(local_rpc.address, RPC_KEY, MeasureConfig(repeat=3, min_repeat_ms=1, timeout_s=60))
    yield r
    r.close()


@pytest.fixture(scope="session")
def square() -> np.ndarray:
    """A fixed N x N float32 input."""
    return np.random.default_rng(0).standard_normal((N, N), dtype=np.float32)


@pytest.fixture(scope="session")
def scale2_reference(square) -> KernelReference:
    """Input and expected output of ``scale2`` (C = A * 2)."""
    return KernelReference(arrays=(square, square * 2), n_outputs=1)

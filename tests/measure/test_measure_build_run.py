"""Builder and Runner end to end: real builds, run on a real RPC worker through a real tracker."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from measure_kernels import RPC_KEY, N, matmul_module, unbuildable_module

from measure import (
    Builder,
    KernelReference,
    MeasureConfig,
    Runner,
    classify_build_error,
)
from measure.tvmapi import make_target

pytestmark = pytest.mark.slow  # tunes, builds or starts processes: left out of the fast tier


def test_builds_succeed(builds):
    for name, result in builds.items():
        assert result.error is None, name
        assert result.artifact_path and os.path.isfile(result.artifact_path), name
        assert result.build_time_s > 0, name


def test_matmul_is_ok_with_every_repeat_timed(builds, runner, square):
    a = square
    b = np.random.default_rng(1).standard_normal((N, N), dtype=np.float32)
    reference = KernelReference(arrays=(a, b, a @ b), n_outputs=1)

    [result] = runner.run([builds["matmul"]], reference)

    assert result.status == "ok", result.error
    assert result.error == ""
    assert len(result.times_s) == runner.config.repeat * result.rounds and result.rounds >= 1
    assert all(t > 0 for t in result.times_s)


def test_wrong_values_are_wrong_result(builds, runner, square):
    reference = KernelReference(arrays=(square, square * 3), n_outputs=1)  # the kernel computes A * 2

    [result] = runner.run([builds["scale2"]], reference)

    assert result.status == "wrong_result"
    assert result.times_s == ()
    assert "wrong_result: output 0:" in result.error
    assert "elements differ from the reference" in result.error
    assert "max abs error" in result.error


def test_unwritten_half_is_caught_by_fresh_nan_outputs(builds, runner, scale2_reference):
    # The complete kernel runs first with the same reference: the half-written one
    # must still fail, so its output buffer cannot be the previous candidate's.
    full, half = runner.run([builds["scale2"], builds["half_written"]], scale2_reference)

    assert full.status == "ok", full.error
    assert half.status == "wrong_result"
    assert half.times_s == ()
    assert f"{N * N // 2} of {N * N} elements differ" in half.error
    assert f"{N * N // 2} NaN" in half.error


def test_unbuildable_module_is_build_error(builder):
    bad, good = builder.build([unbuildable_module(), matmul_module(8)])

    assert bad.artifact_path is None
    assert bad.error is not None and bad.error.startswith("build error:")
    assert "are not passed in as API arguments" in bad.error
    assert classify_build_error(bad.error) == "build_error"
    # One failure does not spoil the rest of the batch.
    assert good.error is None and good.artifact_path and os.path.isfile(good.artifact_path)
    os.remove(good.artifact_path)


def test_build_timeout_is_recorded_as_timeout():
    builder = Builder(make_target({"kind": "llvm"}), workers=1, timeout_s=0.01, warm_up=False)
    try:
        [result] = builder.build([matmul_module(8)])
    finally:
        builder.close()
    assert result.artifact_path is None
    assert result.error == "build timeout: killed after 0.01 s"
    assert classify_build_error(result.error) == "timeout"


def test_run_timeout_then_the_runner_recovers(builds, local_rpc, scale2_reference):
    slow_reference = KernelReference(arrays=(np.ones(N, np.float32), np.zeros(1, np.float32)), n_outputs=1)
    runner = Runner(local_rpc.address, RPC_KEY, MeasureConfig(repeat=2, min_repeat_ms=1, timeout_s=2))
    try:
        [slow] = runner.run([builds["slow"]], slow_reference)
        [good] = runner.run([builds["scale2"]], scale2_reference)
    finally:
        runner.close()

    assert slow.status == "timeout"
    assert slow.times_s == ()
    assert "2 s" in slow.error
    assert good.status == "ok", good.error
    assert len(good.times_s) == 2 * good.rounds


def test_hang_mid_batch_is_timeout_for_that_candidate_only(builds, local_rpc):
    # A batch shares one session until the hang. The hang is charged only once it has
    # run its whole timeout as its session's first candidate; the next one is measured.
    reference = KernelReference(arrays=(np.ones(N, np.float32), np.array([2.0**20], np.float32)), n_outputs=1)
    runner = Runner(local_rpc.address, RPC_KEY, MeasureConfig(repeat=2, min_repeat_ms=1, timeout_s=2))
    try:
        before, slow, after = runner.run([builds["quick"], builds["slow"], builds["quick"]], reference)
    finally:
        runner.close()

    assert [before.status, slow.status, after.status] == ["ok", "timeout", "ok"], [before, slow, after]
    assert slow.times_s == () and "2 s" in slow.error
    assert slow.end - slow.start >= 2.0
    assert before.end <= slow.start and slow.end <= after.start
    assert before.worker == slow.worker == after.worker != ""
    for result in (before, after):
        assert len(result.times_s) == 2 * result.rounds and result.rounds >= 1


def test_sub_second_timeout_frees_the_worker(builds, local_rpc, runner, scale2_reference):
    # The worker must end a timed-out session itself; otherwise it stays busy with
    # the runaway kernel and every later candidate on the key times out.
    slow_reference = KernelReference(arrays=(np.ones(N, np.float32), np.zeros(1, np.float32)), n_outputs=1)
    quick = Runner(local_rpc.address, RPC_KEY, MeasureConfig(repeat=1, min_repeat_ms=1, timeout_s=0.5))
    try:
        [slow] = quick.run([builds["slow"]], slow_reference)
    finally:
        quick.close()
    assert slow.status == "timeout"

    start = time.monotonic()
    [good] = runner.run([builds["scale2"]], scale2_reference)
    assert good.status == "ok", good.error
    assert time.monotonic() - start < 10, "the worker stayed busy with the timed-out kernel"


def test_worker_name(local_rpc, runner):
    assert runner.worker_name == f"{RPC_KEY}@{local_rpc.address}"

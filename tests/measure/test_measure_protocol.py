"""MeasureConfig validation and the classification of failure messages."""

from __future__ import annotations

import numpy as np
import pytest

from measure import KernelReference, MeasureConfig, classify_build_error, first_line
from measure.measurement import timing
from measure.protocol import classify_run_error, coefficient_of_variation


def test_defaults_are_valid():
    config = MeasureConfig()
    assert config.number >= 1 and config.repeat >= 1 and config.timeout_s > 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"repeat": 0}, "--repeat must be at least 1, got 0"),
        ({"number": 0}, "--number must be at least 1, got 0"),
        ({"number": -3}, "--number must be at least 1, got -3"),
        ({"min_repeat_ms": -1}, "--min-repeat-ms must not be negative, got -1"),
        ({"cold_bytes": -1}, "--cold-bytes must not be negative, got -1"),
        ({"timeout_s": 0}, "--timeout must be positive, got 0"),
        ({"timeout_s": -2.5}, "--timeout must be positive, got -2.5"),
        ({"max_cv": 0}, "max_cv must be positive, got 0"),
        ({"remeasure": -1}, "remeasure must not be negative, got -1"),
        ({"retries": -1}, "retries must not be negative, got -1"),
        ({"device_wait_s": 0}, "device_wait_s must be positive, got 0"),
    ],
)
def test_invalid_config_is_refused(kwargs, message):
    with pytest.raises(ValueError) as info:
        MeasureConfig(**kwargs)
    assert str(info.value) == message


def test_edge_values_are_accepted():
    config = MeasureConfig(number=1, repeat=1, min_repeat_ms=0, timeout_s=0.1)
    assert (config.number, config.repeat, config.min_repeat_ms, config.timeout_s) == (1, 1, 0, 0.1)


def _gemv(rows: int) -> KernelReference:
    """x [1, 256], W [rows, 256], out [1, rows] in float32."""
    return KernelReference((np.zeros((1, 256), "float32"), np.zeros((rows, 256), "float32"),
                            np.zeros((1, rows), "float32")), n_outputs=1)


@pytest.mark.parametrize(
    ("rows", "device", "cache_flush", "cold"),
    [
        (2048, "cpu", True, True),  # 2 MiB of weights: each timed call follows a flush
        (64, "cpu", True, False),  # 64 KiB: calibrated to min_repeat_ms, flushed per repeat
        (2048, "cuda", True, False),  # no CPU cache flush on a GPU
        (2048, "cpu", False, False),  # flushing turned off: warm, as asked
    ],
)
def test_large_kernels_are_timed_cold(rows, device, cache_flush, cold):
    config = MeasureConfig(number=2, repeat=4, min_repeat_ms=20, cache_flush=cache_flush)
    got = timing(config, device, _gemv(rows))
    flush = "cache_flush_cpu_non_first_arg" if cache_flush and device == "cpu" else ""
    expected = {"number": 1, "min_repeat_ms": 0} if cold else {"number": 2, "min_repeat_ms": 20}
    assert got == {**expected, "repeat": 4, "f_preproc": flush}
    everything_cold = timing(MeasureConfig(cold_bytes=0), "cpu", _gemv(1))
    assert (everything_cold["number"], everything_cold["min_repeat_ms"]) == (1, 0)


@pytest.mark.parametrize(
    ("message", "status"),
    [
        ("build timeout: killed after 60 s", "timeout"),
        ("build error: InternalError: Check failed: undefined.size() == 0", "build_error"),
        ("", "build_error"),
    ],
)
def test_classify_build_error(message, status):
    assert classify_build_error(message) == status


@pytest.mark.parametrize(
    ("message", "status"),
    [
        ("RuntimeError: wrong_result: output 0: 3 of 9 elements differ from the reference", "wrong_result"),
        ("run timeout: killed after 2 s", "timeout"),
        ("RPCSessionTimeoutError: Your 2.0s session has expired", "timeout"),
        ("ConnectionResetError: [Errno 104] Connection reset by peer", "worker_lost"),
        ("BrokenPipeError: [Errno 32] Broken pipe", "worker_lost"),
        ("RuntimeError: Cannot request key after 5 retry, last_error: connection refused", "worker_lost"),
        ("TVMError: Segmentation fault", "run_error"),
    ],
)
def test_classify_run_error(message, status):
    assert classify_run_error(message) == status


@pytest.mark.parametrize(
    ("message", "line"),
    [
        ("Traceback:\n  File x\nInternalError: Check failed\n  note: more\n", "InternalError: Check failed"),
        ("noise\nRuntimeError: wrong_result: output 0 differs\n", "RuntimeError: wrong_result: output 0 differs"),
        ("first\n\n  last line  \n\n", "last line"),
        ("", ""),
    ],
)
def test_first_line(message, line):
    assert first_line(message) == line


def test_first_line_is_cut_to_the_limit():
    assert first_line("ValueError: " + "x" * 1000, limit=20) == "ValueError: xxxxxxxx"


@pytest.mark.parametrize(
    ("times", "cv"),
    [
        ((), 0.0),
        ((1.0,), 0.0),
        ((2.0, 2.0, 2.0), 0.0),
        ((1.0, 3.0), 2 ** 0.5 / 2),  # stdev sqrt(2) (n - 1 in the denominator) over mean 2
        ((1e-6, 2e-6, 3e-6), 0.5),
    ],
)
def test_coefficient_of_variation(times, cv):
    assert coefficient_of_variation(times) == pytest.approx(cv)

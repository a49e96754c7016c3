"""The measurement protocol: its knobs and the classification of failures.

Knob names follow TVM's tools (``number``, ``repeat``, ``min_repeat_ms``,
``timeout``). TVM's ``time_evaluator`` raises ``number`` until one repeat lasts
at least ``min_repeat_ms``; each repeat time is the mean over ``number`` runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from database.status import MeasureStatus

WRONG_RESULT_TAG = "wrong_result:"


@dataclass(frozen=True)
class MeasureConfig:
    """How each candidate is built and timed.

    Parameters
    ----------
    number : int
        Runs per repeat (raised by TVM to reach ``min_repeat_ms``).
    repeat : int
        Repeats; every repeat time is stored.
    min_repeat_ms : int
        Minimum duration of one repeat, in milliseconds.
    timeout_s : float
        Seconds allowed for one candidate's build, and separately for its run.
    cache_flush : bool
        Flush the CPU cache between repeats (TVM's ``cache_flush_cpu_non_first_arg``:
        every argument but the first).
    cold_bytes : int
        A kernel whose arguments after the first take at least this many bytes is timed
        cold: one call per repeat, each right after the flush (``number`` 1, no
        ``min_repeat_ms``). Inside a layer such a kernel meets its weights after the
        rest of the layer has pushed them out of the cache; calls repeated back to back
        would find them in the last-level cache and time it too fast (a decode
        projection 1.3 to 2 times too fast on a CPU with a 32 MiB L3). Only with
        ``cache_flush`` on a CPU; 0 times every kernel cold.
    rtol, atol : float
        Tolerances of the correctness check against the reference outputs:
        ``|out - ref| <= atol + rtol * |ref|`` elementwise.
    max_cv : float
        Largest coefficient of variation (sample standard deviation / mean) of the
        repeat times that is accepted; above it the candidate is timed again.
    remeasure : int
        How many times a noisy candidate is timed again (all repeats are kept).
    device_wait_s : float
        Seconds a candidate may wait for a free worker of the key (or for an
        unreachable tracker to come back); not part of its ``timeout_s``.
    retries : int
        How many times a candidate whose worker was lost is sent to another worker.
    """

    number: int = 1
    repeat: int = 5
    min_repeat_ms: int = 20
    timeout_s: float = 60.0
    cache_flush: bool = True
    cold_bytes: int = 1 << 20
    rtol: float = 1e-3
    atol: float = 1e-3
    max_cv: float = 0.1
    remeasure: int = 2
    device_wait_s: float = 120.0
    retries: int = 2

    def __post_init__(self) -> None:
        for name in ("number", "repeat"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be at least 1, got {getattr(self, name)}")
        if self.cold_bytes < 0:
            raise ValueError(f"--cold-bytes must not be negative, got {self.cold_bytes}")
        if self.min_repeat_ms < 0:
            raise ValueError(f"--min-repeat-ms must not be negative, got {self.min_repeat_ms}")
        if self.timeout_s <= 0:
            raise ValueError(f"--timeout must be positive, got {self.timeout_s}")
        if self.max_cv <= 0:
            raise ValueError(f"max_cv must be positive, got {self.max_cv}")
        for name in ("remeasure", "retries"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
        if self.device_wait_s <= 0:
            raise ValueError(f"device_wait_s must be positive, got {self.device_wait_s}")


def coefficient_of_variation(times_s) -> float:
    """Sample standard deviation over mean of repeat times (0 for fewer than two)."""
    import statistics

    if len(times_s) < 2:
        return 0.0
    mean = statistics.fmean(times_s)
    return statistics.stdev(times_s) / mean if mean > 0 else 0.0


def classify_build_error(message: str) -> MeasureStatus:
    """Status of a failed build: ``timeout`` or ``build_error``."""
    return MeasureStatus.TIMEOUT if "timeout" in message.lower() else MeasureStatus.BUILD_ERROR


def classify_run_error(message: str) -> MeasureStatus:
    """Status of a failed run from TVM's runner message.

    ``wrong_result`` when the correctness check failed, ``timeout`` when the run
    was killed for time, ``worker_lost`` when the connection to the worker broke,
    else ``run_error``.
    """
    lower = message.lower()
    if WRONG_RESULT_TAG in message:
        return MeasureStatus.WRONG_RESULT
    if "timeout" in lower:
        return MeasureStatus.TIMEOUT
    if any(s in lower for s in ("connection reset", "broken pipe", "socket", "connection refused", "eof")):
        return MeasureStatus.WORKER_LOST
    return MeasureStatus.RUN_ERROR


def first_line(message: str, limit: int = 500) -> str:
    """The most telling line of a long TVM error message, at most ``limit`` characters."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        if "Error" in line or WRONG_RESULT_TAG in line or "Timeout" in line:
            return line[:limit]
    return (lines[-1] if lines else "")[:limit]

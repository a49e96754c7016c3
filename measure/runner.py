"""Running built candidates on a worker obtained from the TVM RPC tracker.

MetaSchedule's ``RPCRunner`` does the session, upload and ``time_evaluator``
work; this module gives it two hooks of our own: arguments are fixed inputs
(not random) with fresh output buffers per candidate, filled with NaN, and the
outputs of a first run are checked against the reference before anything is
timed. A mismatch fails the run with ``wrong_result`` and is never a time.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .builder import BuildResult
from .protocol import WRONG_RESULT_TAG, MeasureConfig, classify_run_error, first_line
from .rpc import TrackerAddress
from .tvmapi import ms


@dataclass(frozen=True)
class KernelReference:
    """Inputs and expected outputs of one kernel, in its parameter order.

    ``arrays`` holds one array per PrimFunc parameter; the last ``n_outputs`` are
    the expected outputs (computed by the unscheduled kernel), the others inputs.
    """

    arrays: tuple[np.ndarray, ...]
    n_outputs: int


@dataclass(frozen=True)
class RunResult:
    """The outcome of running one candidate: repeat times in seconds, or a failure."""

    status: str
    times_s: tuple[float, ...] = ()
    error: str = ""


def _alloc_fixed(session, device, args_info, alloc_repeat, *, reference: KernelReference):
    import tvm

    n_in = len(reference.arrays) - reference.n_outputs
    args = []
    for i, array in enumerate(reference.arrays):
        if i < n_in:
            args.append(tvm.runtime.tensor(array, device=device))
        else:
            fill = np.full(array.shape, np.nan, array.dtype) if array.dtype.kind == "f" else np.zeros_like(array)
            args.append(tvm.runtime.tensor(fill, device=device))
    return [args]


def _check_then_time(session, rt_mod, device, evaluator_config, repeated_args, *, reference, rtol, atol):
    from tvm.s_tir.meta_schedule.runner.utils import run_evaluator_common

    args = repeated_args[0]
    rt_mod[rt_mod.entry_name](*args)
    device.sync()
    n_in = len(reference.arrays) - reference.n_outputs
    for k, expected in enumerate(reference.arrays[n_in:]):
        got = args[n_in + k].numpy()
        bad = ~np.isclose(got, expected, rtol=rtol, atol=atol, equal_nan=False)
        if bad.any():
            err = float(np.nanmax(np.abs(got.astype(np.float64) - expected))) if got.dtype.kind == "f" else -1.0
            raise RuntimeError(
                f"{WRONG_RESULT_TAG} output {k}: {int(bad.sum())} of {bad.size} elements differ "
                f"from the reference (max abs error {err:.3g})"
            )
    return run_evaluator_common(rt_mod, device, evaluator_config, repeated_args)


class Runner:
    """Times built candidates on workers of one RPC key, one candidate per device at a time.

    Parameters
    ----------
    tracker : TrackerAddress
        The TVM RPC tracker.
    key : str
        The RPC key of the device pool.
    config : MeasureConfig
        The protocol's knobs.
    device_type : str
        TVM device type on the worker (``cpu`` for llvm targets).
    """

    def __init__(self, tracker: TrackerAddress, key: str, config: MeasureConfig, device_type: str = "cpu") -> None:
        self.tracker = tracker
        self.key = key
        self.config = config
        self.device_type = device_type
        self._rpc = ms.runner.RPCConfig(
            tracker_host=tracker.host,
            tracker_port=tracker.port,
            tracker_key=key,
            session_timeout_sec=int(config.timeout_s),
        )
        self._evaluator = ms.runner.EvaluatorConfig(
            number=config.number,
            repeat=config.repeat,
            min_repeat_ms=config.min_repeat_ms,
            enable_cpu_cache_flush=config.cache_flush and device_type == "cpu",
        )

    @property
    def worker_name(self) -> str:
        """How results name where they ran: the RPC key at the tracker."""
        return f"{self.key}@{self.tracker}"

    def run(self, builds: list[BuildResult], reference: KernelReference, args_info) -> list[RunResult]:
        """Check and time each built candidate; failed builds are skipped by the caller.

        ``args_info`` is MetaSchedule's ``ArgInfo`` list of the kernel.
        """
        runner = ms.runner.RPCRunner(
            rpc_config=self._rpc,
            evaluator_config=self._evaluator,
            f_alloc_argument=functools.partial(_alloc_fixed, reference=reference),
            f_run_evaluator=functools.partial(
                _check_then_time, reference=reference, rtol=self.config.rtol, atol=self.config.atol
            ),
        )
        inputs = [ms.runner.RunnerInput(b.artifact_path, self.device_type, args_info) for b in builds]
        results = []
        for future in runner.run(inputs):
            outcome = future.result()
            if outcome.error_msg:
                results.append(RunResult(classify_run_error(outcome.error_msg), error=first_line(outcome.error_msg)))
            else:
                results.append(RunResult("ok", tuple(float(t) for t in outcome.run_secs)))
        return results

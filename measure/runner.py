"""Running built candidates on a worker obtained from the TVM RPC tracker.

Each run happens in a process of a persistent pool (TVM's ``PopenPoolExecutor``),
which talks to the tracker: request a worker of the key, upload the kernel,
allocate the arguments, run once and check the outputs against the reference,
then time with ``time_evaluator``. Inputs are fixed (not random) and the output
buffers are fresh for every candidate, filled with NaN, so a kernel that skips
an element fails the check. A mismatch is ``wrong_result`` and never a time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from tvm.support.popen_pool import PopenPoolExecutor

from .builder import BuildResult
from .protocol import WRONG_RESULT_TAG, MeasureConfig, classify_run_error, first_line
from .rpc import TrackerAddress


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


def _run_one(tracker: TrackerAddress, key: str, artifact: str, device_type: str, reference: KernelReference,
             config: MeasureConfig) -> list[float]:
    import tvm
    from tvm import rpc

    # The worker kills the session after ``timeout_s`` (a float: int() would make 0.5 s "no limit").
    session = rpc.connect_tracker(tracker.host, tracker.port).request(key, session_timeout=config.timeout_s)
    name = os.path.basename(artifact)
    session.upload(artifact, name)
    try:
        lib = session.load_module(name)
        dev = session.device(device_type, 0)
        n_in = len(reference.arrays) - reference.n_outputs
        args = [tvm.runtime.tensor(a, device=dev) for a in reference.arrays[:n_in]]
        for expected in reference.arrays[n_in:]:
            fill = np.full(expected.shape, np.nan, expected.dtype) if expected.dtype.kind == "f" else np.zeros_like(expected)
            args.append(tvm.runtime.tensor(fill, device=dev))
        func = lib[lib.entry_name]
        func(*args)
        dev.sync()
        for k, expected in enumerate(reference.arrays[n_in:]):
            got = args[n_in + k].numpy()
            bad = ~np.isclose(got, expected, rtol=config.rtol, atol=config.atol, equal_nan=True)
            if bad.any():
                diff = np.abs(got.astype(np.float64) - expected.astype(np.float64))[bad]
                n_nan = int(np.isnan(diff).sum())  # NaN on one side only: e.g. an element left unwritten
                details = [f"max abs error {np.nanmax(diff):.3g}"] if n_nan < diff.size else []
                details += [f"{n_nan} NaN (unwritten or invalid)"] if n_nan else []
                raise RuntimeError(
                    f"{WRONG_RESULT_TAG} output {k}: {int(bad.sum())} of {bad.size} elements differ "
                    f"from the reference ({', '.join(details)})"
                )
        evaluator = lib.time_evaluator(
            lib.entry_name, dev, number=config.number, repeat=config.repeat, min_repeat_ms=config.min_repeat_ms,
            f_preproc="cache_flush_cpu_non_first_arg" if config.cache_flush and device_type == "cpu" else "",
        )
        return [float(t) for t in evaluator(*args).results]
    finally:
        session.remove(name)
        session.remove(name + ".so")


class Runner:
    """Checks and times built candidates on workers of one RPC key, one candidate per device at a time.

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
        self._pool = PopenPoolExecutor(max_workers=1, timeout=config.timeout_s)

    @property
    def worker_name(self) -> str:
        """How results name where they ran: the RPC key at the tracker."""
        return f"{self.key}@{self.tracker}"

    def run(self, builds: list[BuildResult], reference: KernelReference) -> list[RunResult]:
        """Check and time each built candidate (failed builds are the caller's to skip)."""
        results = []
        for build in builds:
            future = self._pool.submit(
                _run_one, self.tracker, self.key, build.artifact_path, self.device_type, reference, self.config
            )
            try:
                times = future.result()
            except TimeoutError:
                results.append(RunResult("timeout", error=f"run timeout: killed after {self.config.timeout_s:g} s"))
                continue
            except Exception as err:  # the pool re-raises the worker's exception
                message = str(err)
                results.append(RunResult(classify_run_error(message), error=first_line(message)))
                continue
            results.append(RunResult("ok", tuple(times)))
        return results

    def close(self) -> None:
        """Stop the run process."""
        try:
            self._pool.shutdown()
        except Exception:  # noqa: BLE001 - the process is already gone (e.g. after Ctrl-C)
            pass

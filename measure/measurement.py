"""Measuring a chunk of candidates in one RPC session on a worker, run in a process of the runner's pool.

Steps: ask the tracker for a free worker of the key (waiting at most
``device_wait_s``, reconnecting to a tracker that restarts), open an RPC session
whose ``timeout_s`` the worker enforces (it kills the session's process), and
upload the reference inputs and NaN-filled output buffers once. Then, for each
candidate in turn: upload and load the kernel, run it once on fresh copies (made
on the worker) of those inputs and output buffers, check the outputs against the
reference, then time it with TVM's ``time_evaluator``: one warm-up call, then
``repeat`` repeats, each after a CPU cache flush and each ``number`` calls long,
``number`` raised until a repeat lasts at least ``min_repeat_ms`` (TVM's
``WrapTimeEvaluator``); a kernel whose arguments after the first reach ``cold_bytes``
is timed one call per flushed repeat instead (see :class:`MeasureConfig`). When the
coefficient of variation of a round's repeats is over ``max_cv`` the candidate is
timed again, at most ``remeasure`` times; every repeat time is kept.

The session's ``timeout_s`` is each candidate's own: a candidate starts only
while less than half of it has passed, and a candidate that the session's end
interrupts is a ``timeout`` only when it was the session's first (it had the
whole ``timeout_s``); otherwise the runner measures it again in a new session.
A failure that may have broken the session (``RUN_FAILED``) ends it too.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from database.status import MeasureStatus

from .protocol import (
    WRONG_RESULT_TAG,
    MeasureConfig,
    coefficient_of_variation,
    first_line,
)
from .rpc import TrackerAddress, TrackerError, ask_tracker

#: Status of a measurement that found no free worker within ``device_wait_s``.
NO_WORKER = "no_worker"
#: Status of a measurement that failed while running (the runner tells a run error from a lost worker).
RUN_FAILED = "run_failed"


@dataclass(frozen=True)
class KernelReference:
    """Inputs and expected outputs of one kernel, in its parameter order.

    ``arrays`` holds one array per PrimFunc parameter; the last ``n_outputs`` are
    the expected outputs (computed by the unscheduled kernel), the others inputs.
    """

    arrays: tuple[np.ndarray, ...]
    n_outputs: int


class NoFreeWorker(Exception):
    """No worker of the key was handed out within the wait limit."""


def request_worker(tracker: TrackerAddress, key: str, wait_s: float) -> tuple[str, int, str]:
    """Ask the tracker for a free worker of ``key``: its host, port and match key.

    Waits up to ``wait_s`` seconds, both for a free worker and for a tracker that
    cannot be reached (it may be restarting). Speaks TVM's tracker protocol
    (``TrackerSession.request`` does the same without a wait limit).

    Raises
    ------
    NoFreeWorker
        When nothing was handed out within ``wait_s``; the message says why.
    """
    from tvm.rpc import base

    deadline = time.monotonic() + wait_s
    why = "every worker stayed busy"
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            value = ask_tracker(tracker, [base.TrackerCode.REQUEST, key, "", 1], timeout_s=remaining)
        except TimeoutError:
            break
        except TrackerError as err:
            raise NoFreeWorker(str(err)) from None
        except OSError as err:  # refused (restarting tracker) or reset while waiting
            why = f"cannot reach the RPC tracker at {tracker}: {err}"
            time.sleep(min(0.5, max(deadline - time.monotonic(), 0)))
            continue
        if value[0] != base.TrackerCode.SUCCESS:
            raise NoFreeWorker(f"the tracker refused the request: {value}")
        host, port, matchkey = value[1]
        return host, int(port), matchkey
    raise NoFreeWorker(f"no free worker with RPC key {key!r} within {wait_s:g} s ({why})")


def measure_candidates(tracker: TrackerAddress, key: str, artifacts: list[str], device_type: str,
                       reference: KernelReference, config: MeasureConfig) -> list[dict]:
    """Measure built candidates (``artifacts``: kernel libraries) in order, in one session on one worker.

    Never raises for the candidates' failures. The session's ``timeout_s`` (which
    the worker enforces by killing the session's process) is each candidate's own:
    a candidate starts only while less than half of it has passed, and one that
    the end of the session interrupts is a ``timeout`` only when it was the
    session's first; otherwise it is left for a new session, where it comes first.

    Returns
    -------
    list of dict
        One per measured candidate, in order: ``status`` (``ok``, ``wrong_result``,
        ``timeout``, ``NO_WORKER``, ``RUN_FAILED``), ``times_s`` (every repeat time,
        seconds), ``rounds``, ``error`` (one line), ``worker`` (``HOST:PORT`` or
        empty), ``start``/``end`` (seconds since the epoch: the candidate's span on
        the worker). ``NO_WORKER`` comes for every candidate. Otherwise the list is
        shorter than ``artifacts`` when the session ended early: after a
        ``timeout`` or ``RUN_FAILED`` (the last entry), when the session ran out
        during a candidate that was not its first (not returned), or when half of
        ``timeout_s`` had passed; the candidates not returned are unmeasured.
    """
    from tvm import rpc

    blank = {"status": MeasureStatus.OK, "times_s": [], "rounds": 0, "error": "", "worker": "",
             "start": 0.0, "end": 0.0}
    try:
        host, port, matchkey = request_worker(tracker, key, config.device_wait_s)
    except NoFreeWorker as err:
        return [dict(blank, status=NO_WORKER, error=str(err)) for _ in artifacts]
    results = []
    session = inputs = None
    opened = time.monotonic()
    for k, artifact in enumerate(artifacts):
        if results and time.monotonic() - opened > config.timeout_s / 2:
            break
        out = dict(blank, times_s=[], worker=f"{host}:{port}", start=time.time())
        try:
            if session is None:
                # The worker kills the session after ``timeout_s`` (a float: int() would make 0.5 s "no limit").
                session = rpc.connect(host, port, matchkey, session_timeout=config.timeout_s)
                inputs = _upload_reference(session, device_type, reference)
            _check_and_time(session, f"{k}-{os.path.basename(artifact)}", artifact, device_type, inputs, reference,
                            config, out)
        except Exception as err:  # noqa: BLE001 - classified here, recorded by the caller
            message = str(err)
            if "RPCSessionTimeoutError" in message or "session has expired" in message:
                if results:
                    break  # not this candidate's own timeout: measured again in a new session
                status, message = MeasureStatus.TIMEOUT, f"run timeout: killed after {config.timeout_s:g} s"
            elif WRONG_RESULT_TAG in message:
                status = MeasureStatus.WRONG_RESULT
            else:
                status = RUN_FAILED
            out.update(status=status, error=first_line(message), times_s=[])
        out["end"] = time.time()
        results.append(out)
        if out["status"] in (MeasureStatus.TIMEOUT, RUN_FAILED):
            break
    # Dropping the session's last references closes it; the worker deletes its directory.
    return results


def _upload_reference(session, device_type: str, reference: KernelReference) -> list:
    """The reference's inputs, and a NaN-filled (floats) or zero buffer per output, on the worker."""
    import tvm

    dev = session.device(device_type, 0)
    n_in = len(reference.arrays) - reference.n_outputs
    arrays = list(reference.arrays[:n_in])
    for expected in reference.arrays[n_in:]:
        arrays.append(np.full(expected.shape, np.nan, expected.dtype) if expected.dtype.kind == "f"
                      else np.zeros_like(expected))
    return [tvm.runtime.tensor(a, device=dev) for a in arrays]


def _check_and_time(session, name: str, artifact: str, device_type: str, uploaded: list,
                    reference: KernelReference, config: MeasureConfig, out: dict) -> None:
    import tvm

    session.upload(artifact, name)
    lib = session.load_module(name)
    dev = session.device(device_type, 0)
    # Fresh copies, made on the worker, of the uploaded inputs and NaN outputs: an earlier
    # candidate of the session may have written into its buffers.
    args = []
    for source in uploaded:
        copy = tvm.runtime.empty(source.shape, source.dtype, dev)
        copy.copyfrom(source)
        args.append(copy)
    n_in = len(reference.arrays) - reference.n_outputs
    func = lib[lib.entry_name]
    func(*args)
    dev.sync()
    for k, expected in enumerate(reference.arrays[n_in:]):
        _check_output(k, args[n_in + k].numpy(), expected, config)
    evaluator = lib.time_evaluator(lib.entry_name, dev, **timing(config, device_type, reference))
    for _ in range(1 + config.remeasure):
        times = [float(t) for t in evaluator(*args).results]
        out["times_s"] += times
        out["rounds"] += 1
        if coefficient_of_variation(times) <= config.max_cv:
            break


def timing(config: MeasureConfig, device_type: str, reference: KernelReference) -> dict:
    """``time_evaluator``'s keyword arguments for one kernel under ``config``.

    ``number``, ``repeat``, ``min_repeat_ms`` and ``f_preproc`` (the cache flush, on a
    CPU only); a kernel whose arguments after the first (``reference.arrays[1:]``, inputs
    and outputs) take at least ``config.cold_bytes`` bytes gets one call per repeat and
    no ``min_repeat_ms``, so each timed call follows a flush.
    """
    flush = config.cache_flush and device_type == "cpu"
    cold = flush and sum(a.nbytes for a in reference.arrays[1:]) >= config.cold_bytes
    return {
        "number": 1 if cold else config.number,
        "repeat": config.repeat,
        "min_repeat_ms": 0 if cold else config.min_repeat_ms,
        "f_preproc": "cache_flush_cpu_non_first_arg" if flush else "",
    }


def _check_output(k: int, got: np.ndarray, expected: np.ndarray, config: MeasureConfig) -> None:
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

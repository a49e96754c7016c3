"""One candidate's measurement on a worker, run in a process of the runner's pool.

Steps: ask the tracker for a free worker of the key (waiting at most
``device_wait_s``, reconnecting to a tracker that restarts), open an RPC session
whose ``timeout_s`` the worker enforces (it kills the session's process), upload
the kernel, run it once on fixed inputs into fresh NaN-filled output buffers and
check the outputs against the reference, then time it with TVM's
``time_evaluator``: one warm-up call, then ``repeat`` repeats, each after a CPU
cache flush and each ``number`` calls long, ``number`` raised until a repeat lasts
at least ``min_repeat_ms`` (TVM's ``WrapTimeEvaluator``). When the coefficient of
variation of a round's repeats is over ``max_cv`` the candidate is timed again,
at most ``remeasure`` times; every repeat time is kept.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from dataclasses import dataclass

import numpy as np

from .protocol import (
    WRONG_RESULT_TAG,
    MeasureConfig,
    coefficient_of_variation,
    first_line,
)
from .rpc import TrackerAddress

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
            with socket.create_connection((tracker.host, tracker.port), timeout=min(remaining, 5.0)) as sock:
                sock.settimeout(remaining)
                sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
                if struct.unpack("<i", base.recvall(sock, 4))[0] != base.RPC_TRACKER_MAGIC:
                    raise NoFreeWorker(f"{tracker} is not a TVM RPC tracker")
                base.sendjson(sock, [base.TrackerCode.REQUEST, key, "", 1])
                value = base.recvjson(sock)
                if value[0] != base.TrackerCode.SUCCESS:
                    raise NoFreeWorker(f"the tracker refused the request: {value}")
                host, port, matchkey = value[1]
                return host, int(port), matchkey
        except TimeoutError:
            break
        except OSError as err:  # refused (restarting tracker) or reset while waiting
            why = f"cannot reach the RPC tracker at {tracker}: {err}"
            time.sleep(min(0.5, max(deadline - time.monotonic(), 0)))
    raise NoFreeWorker(f"no free worker with RPC key {key!r} within {wait_s:g} s ({why})")


def measure_candidate(tracker: TrackerAddress, key: str, artifact: str, device_type: str,
                      reference: KernelReference, config: MeasureConfig) -> dict:
    """Measure one built candidate (``artifact``: the kernel library); never raises for its failures.

    Returns a dict: ``status`` (``ok``, ``wrong_result``, ``timeout``, ``NO_WORKER``,
    ``RUN_FAILED``), ``times_s`` (every repeat time, seconds),
    ``rounds``, ``error`` (one line), ``worker`` (``HOST:PORT`` or empty),
    ``start``/``end`` (seconds since the epoch: the session's span on the worker).
    """
    from tvm import rpc

    out = {"status": "ok", "times_s": [], "rounds": 0, "error": "", "worker": "", "start": 0.0, "end": 0.0}
    try:
        host, port, matchkey = request_worker(tracker, key, config.device_wait_s)
    except NoFreeWorker as err:
        return dict(out, status=NO_WORKER, error=str(err))
    out["worker"] = f"{host}:{port}"
    session = None
    out["start"] = time.time()
    try:
        # The worker kills the session after ``timeout_s`` (a float: int() would make 0.5 s "no limit").
        session = rpc.connect(host, port, matchkey, session_timeout=config.timeout_s)
        _check_and_time(session, artifact, device_type, reference, config, out)
    except Exception as err:  # noqa: BLE001 - classified here, recorded by the caller
        message = str(err)
        if "RPCSessionTimeoutError" in message or "session has expired" in message:
            status, message = "timeout", f"run timeout: killed after {config.timeout_s:g} s"
        elif WRONG_RESULT_TAG in message:
            status = "wrong_result"
        else:
            status = RUN_FAILED
        out.update(status=status, error=first_line(message), times_s=[])
    out["end"] = time.time()
    return out


def _check_and_time(session, artifact: str, device_type: str, reference: KernelReference, config: MeasureConfig,
                    out: dict) -> None:
    import tvm

    name = os.path.basename(artifact)
    session.upload(artifact, name)
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
        _check_output(k, args[n_in + k].numpy(), expected, config)
    evaluator = lib.time_evaluator(
        lib.entry_name, dev, number=config.number, repeat=config.repeat, min_repeat_ms=config.min_repeat_ms,
        f_preproc="cache_flush_cpu_non_first_arg" if config.cache_flush and device_type == "cpu" else "",
    )
    for _ in range(1 + config.remeasure):
        times = [float(t) for t in evaluator(*args).results]
        out["times_s"] += times
        out["rounds"] += 1
        if coefficient_of_variation(times) <= config.max_cv:
            break
    # The worker deletes the session's directory when the session ends.


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

"""Running built candidates on the workers of an RPC key, one candidate per worker at a time.

A batch is cut into chunks, one per registered worker of the key (at most
``Runner.MAX_CHUNK`` candidates each), and each chunk is measured in one RPC
session on one worker (see :mod:`measure.measurement`) by a process of a
persistent pool (TVM's ``PopenPoolExecutor``) with one process per worker: the
batch is spread over every free worker while each measurement holds its device
alone (the tracker hands a worker to one session at a time), and a worker's
session process, the reference inputs and the tracker round trips are paid once
per chunk rather than once per candidate. A chunk asks the tracker for a worker
with its own wait limit (``device_wait_s``), so a candidate's ``timeout_s``
(enforced by the worker on the session) never counts the wait for a free device.
The candidates of a chunk its session did not reach (it ended early, see
:func:`~measure.measurement.measure_candidates`) go back to the queue, first.

Faults: a run that fails is ``run_error`` when its worker is still, or again at
once, registered at the tracker (a kernel error, or a kernel that crashed the
worker's session process: :mod:`measure.worker` serves again), and
``worker_lost`` otherwise; a lost candidate goes to another worker, up to
``retries`` times, and the candidates measured before it keep their results.
When no worker of the key is left, the remaining candidates are
``worker_lost`` and the next :meth:`Runner.run` raises
:class:`~measure.rpc.TrackerError` naming the key, so every result of the batch
reaches its caller first.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import dataclass, replace

from tvm.support.popen_pool import PopenPoolExecutor

from database.status import MeasureStatus

from .builder import BuildResult
from .lifetime import bind_tvm_pools, die_on_sigint
from .measurement import NO_WORKER, RUN_FAILED, KernelReference, measure_candidates
from .protocol import MeasureConfig, first_line
from .rpc import TrackerAddress, TrackerError, queue_status, workers_for_key

__all__ = ["KernelReference", "RunResult", "Runner"]


@dataclass(frozen=True)
class RunResult:
    """The outcome of running one candidate.

    Attributes
    ----------
    status : MeasureStatus
        ``ok``, ``timeout``, ``wrong_result``, ``run_error`` or ``worker_lost``.
    times_s : tuple of float
        Every repeat time in seconds (each the mean over the calibrated ``number``
        runs), of every timing round; empty on failure.
    error : str
        One line saying what failed; empty when ``ok``.
    worker : str
        ``KEY@HOST:PORT`` of the worker that ran it (empty when none was reached).
    rounds : int
        Timing rounds (more than one when the repeats were too noisy).
    retries : tuple of RunResult
        Earlier attempts on workers that were lost (status ``worker_lost``).
    start, end : float
        Seconds since the epoch: when the session on the worker opened and ended
        (0 when no worker was reached).
    """

    status: MeasureStatus
    times_s: tuple[float, ...] = ()
    error: str = ""
    worker: str = ""
    rounds: int = 0
    retries: tuple[RunResult, ...] = ()
    start: float = 0.0
    end: float = 0.0

    @property
    def median_s(self) -> float | None:
        """The candidate's time: the median of its repeat times in seconds (None on failure)."""
        return statistics.median(self.times_s) if self.times_s else None


class Runner:
    """Checks and times built candidates on the workers of one RPC key, one candidate per device at a time.

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

    #: Seconds to watch the tracker for a worker whose session broke to register again.
    COME_BACK_S = 3.0
    #: Most candidates measured in one session (one task of the pool).
    MAX_CHUNK = 16

    def __init__(self, tracker: TrackerAddress, key: str, config: MeasureConfig, device_type: str = "cpu") -> None:
        self.tracker = tracker
        self.key = key
        self.config = config
        self.device_type = device_type
        self._pool: PopenPoolExecutor | None = None
        self._slots = 0
        self._no_worker: str | None = None

    @property
    def worker_name(self) -> str:
        """How results name the pool they ran on: the RPC key at the tracker."""
        return f"{self.key}@{self.tracker}"

    def run(self, builds: list[BuildResult], reference: KernelReference) -> list[RunResult]:
        """Check and time each built candidate; one result per build, in order.

        Failed builds are the caller's to skip. Candidates run concurrently, one
        per registered worker of the key; a chunk of them per session.

        Raises
        ------
        TrackerError
            When the previous call found no worker of the key left and there is
            still none (or the tracker is still unreachable).
        """
        if not builds:
            return []
        slots = self._count_workers()
        if self._no_worker is not None:
            if not slots:
                raise TrackerError(self._no_worker)
            self._no_worker = None
        self._ensure_pool(max(slots, 1))
        results: list[RunResult | None] = [None] * len(builds)
        lost: dict[int, list[RunResult]] = {i: [] for i in range(len(builds))}
        pending = deque((i, 0) for i in range(len(builds)))
        running = {}
        while pending or running:
            while pending and len(running) < self._slots and self._no_worker is None:
                size = min(self.MAX_CHUNK, -(-len(pending) // (self._slots - len(running))))
                chunk = [pending.popleft() for _ in range(size)]
                future = self._pool.submit(measure_candidates, self.tracker, self.key,
                                           [builds[i].artifact_path for i, _ in chunk], self.device_type, reference,
                                           self.config)
                running[future] = chunk
            if self._no_worker is not None:
                for i, _ in pending:
                    results[i] = RunResult(MeasureStatus.WORKER_LOST, error=self._no_worker)
                pending.clear()
                if not running:
                    break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                chunk = running.pop(future)
                outcomes = self._outcomes(future, len(chunk))
                again = chunk[len(outcomes):]  # not measured: the session ended early
                for (i, attempt), result in zip(chunk, outcomes):
                    if result.status == MeasureStatus.WORKER_LOST and result.worker and attempt < self.config.retries:
                        lost[i].append(result)
                        again.insert(0, (i, attempt + 1))
                    else:
                        results[i] = replace(result, retries=tuple(lost[i]))
                pending.extendleft(reversed(again))
        return results

    def close(self) -> None:
        """Stop the run processes."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            try:
                pool.shutdown()
            except Exception:  # noqa: BLE001 - the processes are already gone (e.g. after Ctrl-C)
                pass

    def _count_workers(self) -> int:
        try:
            return workers_for_key(self.tracker, self.key)
        except TrackerError:
            if self._no_worker is not None:
                raise
            return self._slots  # the tracker may be restarting: the measurements wait for it

    def _ensure_pool(self, slots: int) -> None:
        if self._pool is None or slots != self._slots:
            self.close()
            # The last resort against a client stuck on a silent network: the wait for a
            # device, the worker-enforced session (one per task), and slack for the upload.
            # When it strikes, every candidate of the task is a timeout.
            limit = self.config.device_wait_s + self.config.timeout_s + 30.0
            bind_tvm_pools()  # the client processes end with this process
            self._pool = PopenPoolExecutor(max_workers=slots, timeout=limit, initializer=die_on_sigint)
            self._slots = slots

    def _outcomes(self, future, size: int) -> list[RunResult]:
        """The results of a chunk of ``size`` candidates, in order; fewer when the rest went unmeasured."""
        try:
            outs = future.result()
        except TimeoutError:
            return [RunResult(MeasureStatus.TIMEOUT,
                              error="run timeout: no answer from the worker's session in time")] * size
        except Exception as err:  # noqa: BLE001 - the pool re-raises the measuring process's failure
            return [RunResult(MeasureStatus.RUN_ERROR, error=first_line(str(err)))] * size
        if outs and outs[0]["status"] == NO_WORKER:
            error = outs[0]["error"]
            if not self._count_workers_quiet():
                self._no_worker = f"no worker left with RPC key {self.key!r} on the tracker at {self.tracker}: {error}"
                error = self._no_worker
            return [RunResult(MeasureStatus.WORKER_LOST, error=error)] * size
        return [self._outcome(out) for out in outs]

    def _outcome(self, out: dict) -> RunResult:
        worker = f"{self.key}@{out['worker']}" if out["worker"] else ""
        span = {"start": out["start"], "end": out["end"]}
        status, error = out["status"], out["error"]
        if status == RUN_FAILED:
            if self._registered(out["worker"]):
                if any(s in error for s in ("kShutdown", "Connection reset", "Broken pipe", "Socket")):
                    error = f"the worker's session process died (the kernel crashed it?): {error}"
                return RunResult(MeasureStatus.RUN_ERROR, error=error, worker=worker, **span)
            return RunResult(MeasureStatus.WORKER_LOST, error=f"worker {out['worker']} lost mid-measurement: {error}",
                             worker=worker, **span)
        return RunResult(MeasureStatus(status), tuple(out["times_s"]), error, worker, out["rounds"], **span)

    def _count_workers_quiet(self) -> int:
        try:
            return workers_for_key(self.tracker, self.key)
        except TrackerError:
            return 0

    def _registered(self, address: str) -> bool:
        """Whether the worker at ``HOST:PORT`` is registered at the tracker within ``COME_BACK_S``."""
        time.sleep(0.5)  # the tracker drops a dead worker's registration as its socket closes
        deadline = time.monotonic() + self.COME_BACK_S
        while time.monotonic() < deadline:
            try:
                servers = queue_status(self.tracker, timeout_s=1.0).get("server_info", [])
            except TrackerError:
                return False
            if any(f"{s['addr'][0]}:{s['addr'][1]}" == address for s in servers):
                return True
            time.sleep(0.2)
        return False

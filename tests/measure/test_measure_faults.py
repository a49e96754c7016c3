"""Spreading a batch over several workers, and faults injected into real worker processes.

Each test starts real TVM RPC processes on 127.0.0.1: a tracker and workers of
:mod:`measure.worker`. Faults: a kernel that crashes its worker's session process,
a worker's process killed with SIGKILL mid-measurement (alone: its session
process must end with it, as after an out-of-memory kill), every worker gone, and a tracker
restarted mid-run.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import psutil
import pytest
from measure_kernels import N

from measure import (
    KernelReference,
    LocalRPC,
    MeasureConfig,
    Runner,
    TrackerError,
    workers_for_key,
)

pytestmark = pytest.mark.slow  # tunes, builds or starts processes: left out of the fast tier

KEY = "measure-faults"
# ``second`` sums ones 2**30 times in float32 (it saturates): any finite output is accepted.
SECOND_REFERENCE = KernelReference(arrays=(np.ones(N, np.float32), np.zeros(1, np.float32)), n_outputs=1)
LOOSE = {"rtol": 0.0, "atol": float("inf")}


@pytest.fixture(scope="module")
def two_workers(builds):
    with LocalRPC(key=KEY, workers=2) as rpc:
        yield rpc


def _busy_worker(rpc: LocalRPC, timeout_s: float = 60.0) -> int:
    """Index of the first worker that forks a session process (a measurement started on it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for i, proc in enumerate(rpc.worker_processes):
            try:
                if psutil.Process(proc.pid).children():
                    return i
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.05)
    raise AssertionError("no worker started a session")


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _kill_worker(rpc: LocalRPC, index: int, gone_s: float = 5.0) -> list[psutil.Process]:
    """SIGKILL worker ``index``'s process alone; wait up to ``gone_s`` seconds for its session processes to end.

    Returns the session processes it had.
    """
    proc = rpc.worker_processes[index]
    try:
        sessions = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        sessions = []
    os.kill(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + gone_s
    while any(_alive(p) for p in sessions) and time.monotonic() < deadline:
        time.sleep(0.05)
    return sessions


def test_batch_is_spread_one_candidate_per_worker(two_workers, builds, scale2_reference):
    runner = Runner(two_workers.address, KEY, MeasureConfig(repeat=2, min_repeat_ms=150, **LOOSE))
    try:
        results = runner.run([builds["scale2"]] * 4, scale2_reference)
    finally:
        runner.close()

    assert [r.status for r in results] == ["ok"] * 4, [r.error for r in results]
    workers = {r.worker for r in results}
    assert len(workers) == 2 and all(w.startswith(f"{KEY}@127.0.0.1:") for w in workers)
    # Concurrently on the two workers, never two at once on one worker.
    spans = sorted((r.start, r.end, r.worker) for r in results)
    assert any(a_end > b_start and a_w != b_w for (_, a_end, a_w), (b_start, _, b_w) in zip(spans, spans[1:]))
    for w in workers:
        own = sorted((s, e) for s, e, x in spans if x == w)
        assert all(e1 <= s2 for (_, e1), (s2, _) in zip(own, own[1:]))


def test_crashing_kernel_is_run_error_and_the_worker_serves_again(two_workers, builds, scale2_reference):
    runner = Runner(two_workers.address, KEY, MeasureConfig(repeat=1, min_repeat_ms=0, timeout_s=30))
    try:
        [crash] = runner.run([builds["crash"]], scale2_reference)
        after = runner.run([builds["scale2"]] * 2, scale2_reference)
    finally:
        runner.close()

    assert crash.status == "run_error", crash
    assert crash.error and crash.times_s == ()
    assert crash.worker.startswith(f"{KEY}@127.0.0.1:")
    assert crash.retries == ()
    assert [r.status for r in after] == ["ok", "ok"], [r.error for r in after]
    assert workers_for_key(two_workers.address, KEY) == 2


def test_killed_worker_is_worker_lost_then_retried_then_no_worker_left(two_workers, builds, scale2_reference):
    config = MeasureConfig(repeat=1, min_repeat_ms=0, timeout_s=60, device_wait_s=3, **LOOSE)
    runner = Runner(two_workers.address, KEY, config)
    out = {}
    thread = threading.Thread(target=lambda: out.setdefault("r", runner.run([builds["second"]], SECOND_REFERENCE)))
    try:
        thread.start()
        victim = _busy_worker(two_workers)
        time.sleep(0.3)
        sessions = _kill_worker(two_workers, victim)
        thread.join(timeout=120)
        [result] = out["r"]

        assert not any(_alive(p) for p in sessions)
        assert result.status == "ok", result
        assert len(result.retries) == 1
        lost = result.retries[0]
        assert lost.status == "worker_lost" and "lost mid-measurement" in lost.error
        assert lost.worker != result.worker

        # Kill the last worker: the batch's candidates come back as worker_lost, then the runner stops.
        _kill_worker(two_workers, 1 - victim)
        start = time.monotonic()
        results = runner.run([builds["scale2"]] * 3, scale2_reference)
        assert time.monotonic() - start < 30
        assert [r.status for r in results] == ["worker_lost"] * 3
        assert all(f"no worker left with RPC key {KEY!r}" in r.error for r in results)
        with pytest.raises(TrackerError, match=f"no worker left with RPC key {KEY!r}"):
            runner.run([builds["scale2"]], scale2_reference)
    finally:
        thread.join(timeout=120)
        runner.close()


def _burning_worker(rpc: LocalRPC, cpu_s: float = 0.5, timeout_s: float = 60.0) -> int:
    """Index of the first worker whose session process has run for ``cpu_s`` seconds of CPU (a long kernel)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for i, proc in enumerate(rpc.worker_processes):
            try:
                if any(child.cpu_times().user >= cpu_s for child in psutil.Process(proc.pid).children()):
                    return i
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.05)
    raise AssertionError("no session ran a long kernel")


def test_worker_killed_mid_batch_keeps_what_it_measured(builds):
    # Two workers share the three candidates: one worker measures ``quick`` then ``second``
    # in one session and is killed during ``second``. The first result stands; ``second``
    # is lost, then measured on the other worker.
    config = MeasureConfig(repeat=1, min_repeat_ms=0, timeout_s=60, device_wait_s=10, **LOOSE)
    with LocalRPC(key=KEY, workers=2) as rpc:
        runner = Runner(rpc.address, KEY, config)
        out = {}
        batch = [builds["quick"], builds["second"], builds["quick"]]
        thread = threading.Thread(target=lambda: out.setdefault("r", runner.run(batch, SECOND_REFERENCE)))
        try:
            thread.start()
            victim = _burning_worker(rpc)
            sessions = _kill_worker(rpc, victim)
            thread.join(timeout=120)
            first, second, third = out["r"]
        finally:
            thread.join(timeout=120)
            runner.close()

    assert not any(_alive(p) for p in sessions)
    assert [first.status, second.status, third.status] == ["ok"] * 3, [first, second, third]
    [lost] = second.retries
    assert lost.status == "worker_lost" and "lost mid-measurement" in lost.error
    assert first.worker == lost.worker != second.worker
    assert first.end <= lost.start
    assert first.retries == () and third.retries == ()
    assert all(len(r.times_s) == r.rounds == 1 for r in (first, second, third))


def test_tracker_restart_mid_run(builds, scale2_reference):
    # a restarted tracker imports TVM again, slowly on a loaded machine
    config = MeasureConfig(repeat=1, min_repeat_ms=0, device_wait_s=120)
    with LocalRPC(key=KEY, workers=1) as rpc:
        runner = Runner(rpc.address, KEY, config)
        try:
            [before] = runner.run([builds["scale2"]], scale2_reference)
            rpc.stop_tracker()
            restart = threading.Timer(2.0, rpc.start_tracker)
            restart.start()
            start = time.monotonic()
            [during] = runner.run([builds["scale2"]], scale2_reference)  # waits for the tracker and its worker
            waited = time.monotonic() - start
            restart.join()

            rpc.stop_tracker()  # for good: the candidates are recorded as lost, then the runner stops
            quick = Runner(rpc.address, KEY, MeasureConfig(repeat=1, min_repeat_ms=0, device_wait_s=2))
            try:
                [gone] = quick.run([builds["scale2"]], scale2_reference)
                with pytest.raises(TrackerError, match="cannot reach the RPC tracker"):
                    quick.run([builds["scale2"]], scale2_reference)
            finally:
                quick.close()
        finally:
            runner.close()

    assert before.status == "ok", before.error
    assert during.status == "ok", during.error
    assert 2.0 <= waited < config.device_wait_s
    assert gone.status == "worker_lost"
    assert f"no worker left with RPC key {KEY!r}" in gone.error and "cannot reach the RPC tracker" in gone.error

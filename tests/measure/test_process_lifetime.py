"""Every process the product starts ends when its parent is killed with SIGKILL.

Real processes on 127.0.0.1: a parent of :func:`measure.lifetime.popen` children,
``tune tracker``, ``tune worker`` and ``tune run``. Each parent is killed with
SIGKILL (no cleanup runs) and none of its descendants may be alive a few seconds later.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from measure.rpc import TrackerAddress, free_port, queue_status, workers_for_key

pytestmark = pytest.mark.slow  # tunes, builds or starts processes: left out of the fast tier

GONE_S = 5.0  # how long the descendants of a killed parent may outlive it
START_S = 180.0  # TVM imports slowly on a loaded machine


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_for(condition, timeout_s: float, what: str, proc: subprocess.Popen | None = None):
    """Poll ``condition`` until it returns something true; its value. Fails after ``timeout_s`` or when ``proc``
    exits."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        assert proc is None or proc.poll() is None, f"{what}: the process exited with {proc.returncode}"
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:.0f} s"
        time.sleep(0.1)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


def _has_all(pid: int, parts: tuple[str, ...]) -> list[psutil.Process]:
    """The descendants of ``pid`` once, for each of ``parts``, one descendant's command line contains it."""
    found = _descendants(pid)
    lines = [_cmdline(p) for p in found]
    return found if all(any(part in line for line in lines) for part in parts) else []


def _kill_and_check_gone(parent: subprocess.Popen, children: list[psutil.Process]) -> float:
    """SIGKILL ``parent`` alone; assert none of ``children`` lives ``GONE_S`` later; seconds they took to end."""
    start = time.monotonic()
    parent.kill()
    parent.wait()
    deadline = start + GONE_S
    while any(_alive(c) for c in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [_cmdline(c) for c in children if _alive(c)]
    for child in children:  # never leave one behind, whatever the outcome
        if _alive(child):
            child.kill()
    assert left == [], f"alive {GONE_S:.0f} s after their parent was killed: {left}"
    return time.monotonic() - start


PARENT = textwrap.dedent("""
    import importlib.util, os, sys, threading, time
    spec = importlib.util.spec_from_file_location("lifetime", sys.argv[1])
    lifetime = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lifetime)
    CHILD = (
        "import importlib.util, os, sys, time\\n"
        "spec = importlib.util.spec_from_file_location('lifetime', sys.argv[1])\\n"
        "lifetime = importlib.util.module_from_spec(spec)\\n"
        "spec.loader.exec_module(lifetime)\\n"
        "lifetime.bind_forks()\\n"
        "if os.fork() == 0:\\n"
        "    time.sleep(600)\\n"
        "time.sleep(600)\\n"
    )
    # started from a thread that ends at once: the child must not end with that thread
    thread = threading.Thread(target=lambda: lifetime.popen([sys.executable, "-c", CHILD, sys.argv[1]]))
    thread.start()
    thread.join()
    print("ready", flush=True)
    time.sleep(600)
""")


def test_bound_children_and_their_forks_end_with_a_killed_parent():
    import measure.lifetime

    parent = subprocess.Popen([sys.executable, "-c", PARENT, measure.lifetime.__file__], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert parent.stdout.readline().strip() == "ready"
        family = _wait_for(lambda: [d for d in [_descendants(parent.pid)] if len(d) == 2][:1], 30,
                           "child and its fork")[0]
        time.sleep(0.5)  # the thread that started the child has ended: the child is still there
        assert all(_alive(p) for p in family)
        _kill_and_check_gone(parent, family)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def _tune(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tuner", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def test_killed_tune_worker_and_tune_tracker_leave_nothing_behind():
    port = free_port()
    address = TrackerAddress("127.0.0.1", port)
    tracker = _tune("tracker", "--port", str(port))
    worker = None
    try:
        def tracker_up() -> bool:
            try:
                queue_status(address, timeout_s=1)
                return True
            except Exception:  # noqa: BLE001 - not listening yet
                return False

        _wait_for(tracker_up, START_S, "tune tracker listening", tracker)
        worker = _tune("worker", "--tracker", str(address), "--key", "lifetime")
        _wait_for(lambda: workers_for_key(address, "lifetime"), START_S, "tune worker registered", worker)
        servers = _wait_for(lambda: _has_all(worker.pid, ("measure.worker",)), 10, "the worker's server")

        _kill_and_check_gone(worker, servers)
        # the tracker saw the server's connections close: the worker is gone from `tune workers`
        _wait_for(lambda: workers_for_key(address, "lifetime") == 0, GONE_S, "the killed worker unregistered")
        listed = subprocess.run([sys.executable, "-m", "tuner", "workers", "--tracker", str(address), "--json"],
                                capture_output=True, text=True, timeout=120, check=False)
        assert listed.returncode == 0, listed.stderr
        assert not any(s["key"].endswith(":lifetime") for s in json.loads(listed.stdout)["server_info"])

        _kill_and_check_gone(tracker, _descendants(tracker.pid))
        assert not tracker_up(), "the tracker's port is closed"
    finally:
        for proc in (worker, tracker):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def test_killed_tune_run_leaves_nothing_behind(mlp_onnx, tmp_path):
    run = subprocess.Popen(
        [sys.executable, "-m", "tuner", "run", str(mlp_onnx), "--trials", "64", "--candidates", "1", "--db",
         f"sqlite:///{tmp_path / 'tune.db'}", "-q"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        # its embedded tracker and worker, and its build processes
        family = _wait_for(lambda: _has_all(run.pid, ("measure.tracker", "measure.worker", "tvm.exec.popen_worker")),
                           START_S, "tune run's tracker, worker and build pool", run)
        _kill_and_check_gone(run, family)  # the process alone, as an OOM kill does
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()

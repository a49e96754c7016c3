"""`tune tracker`, `tune worker`, `tune workers`, and `tune run` through an existing tracker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from measure.rpc import free_port

pytestmark = pytest.mark.slow  # tunes, builds or starts processes: left out of the fast tier


def tune(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuner", *args], capture_output=True, text=True, timeout=900, **kwargs)


def workers_json(port: int) -> dict:
    proc = tune("workers", "--tracker", f"127.0.0.1:{port}", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def tracker_and_worker():
    port = free_port()
    tracker = subprocess.Popen([sys.executable, "-m", "tuner", "tracker", "--port", str(port)],
                               stderr=subprocess.PIPE, text=True)
    worker = None
    try:
        deadline = time.monotonic() + 120  # slow on a loaded machine
        while tune("workers", "--tracker", f"127.0.0.1:{port}", "--json").returncode != 0:
            assert time.monotonic() < deadline, "tracker did not start"
            time.sleep(0.5)
        worker = subprocess.Popen([sys.executable, "-m", "tuner", "worker", "--tracker", f"127.0.0.1:{port}",
                                   "--key", "test-key"], text=True)
        while not any(s["key"].endswith("test-key") for s in workers_json(port)["server_info"]):
            assert time.monotonic() < deadline, "worker did not register"
            time.sleep(0.5)
        yield port, tracker, worker
    finally:
        for proc in (worker, tracker):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)


def test_workers_lists_the_key(tracker_and_worker):
    port, _, _ = tracker_and_worker
    status = workers_json(port)
    assert status["queue_info"]["test-key"]["free"] == 1


def test_worker_process_killed_is_started_again(tracker_and_worker):
    port, _, worker = tracker_and_worker
    [child] = psutil.Process(worker.pid).children()
    os.killpg(child.pid, signal.SIGKILL)  # the serving process and its group; `tune worker` stays
    deadline = time.monotonic() + 60
    while True:
        children = [c for c in psutil.Process(worker.pid).children() if c.pid != child.pid]
        registered = any(s["key"].endswith("test-key") for s in workers_json(port)["server_info"])
        if children and registered:
            break
        assert time.monotonic() < deadline, "the worker did not come back"
        time.sleep(0.5)
    assert worker.poll() is None


def test_worker_help_warns_about_uploaded_code():
    proc = tune("worker", "--help")
    assert proc.returncode == 0
    assert "executes the code it receives" in proc.stdout and "trusted networks" in proc.stdout


def test_run_through_an_existing_tracker(tracker_and_worker, tmp_path):
    port, _, _ = tracker_and_worker
    proc = tune("run", "qwen3-tiny", "--seq-len", "8", "--trials", "1", "--candidates", "1",
                "--tracker", f"127.0.0.1:{port}", "--key", "test-key", "--json", "-q",
                "--db", f"sqlite:///{tmp_path}/t.db", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["latency_s"]["tuned"] > 0
    assert summary["measured_trials"] > 0


def test_unknown_key_is_one_line(tracker_and_worker, tmp_path):
    port, _, _ = tracker_and_worker
    proc = tune("run", "qwen3-tiny", "--tracker", f"127.0.0.1:{port}", "--key", "nobody", "--timeout", "2",
                "-q", "--db", f"sqlite:///{tmp_path}/t.db", cwd=tmp_path)
    assert proc.returncode != 0
    assert proc.stderr.strip().count("\n") == 0 and "nobody" in proc.stderr


def test_sigterm_stops_worker_and_tracker_cleanly():
    port = free_port()
    tracker = subprocess.Popen([sys.executable, "-m", "tuner", "tracker", "--port", str(port)])
    worker = None
    try:
        deadline = time.monotonic() + 120  # each `tune` process imports TVM: seconds apiece on a loaded machine
        while tune("workers", "--tracker", f"127.0.0.1:{port}", "--json").returncode != 0:
            assert time.monotonic() < deadline
            time.sleep(0.5)
        worker = subprocess.Popen([sys.executable, "-m", "tuner", "worker", "--tracker", f"127.0.0.1:{port}",
                                   "--key", "k"])
        while not any(s["key"].endswith(":k") for s in workers_json(port)["server_info"]):
            assert time.monotonic() < deadline, "worker did not register"
            time.sleep(0.5)
        for proc in (worker, tracker):
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
    finally:
        for proc in (worker, tracker):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    assert tune("workers", "--tracker", f"127.0.0.1:{port}").returncode != 0, "the tracker's port is closed"

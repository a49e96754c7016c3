"""Tracker addresses, and asking a real tracker (local, or one that is not there) for workers."""

from __future__ import annotations

import os
import socket
import time

import psutil
import pytest
from measure_kernels import RPC_KEY

from measure import (
    DEFAULT_TRACKER_PORT,
    LocalRPC,
    TrackerAddress,
    TrackerError,
    parse_tracker,
    queue_status,
    tracker_from_env,
    wait_for_key,
    workers_for_key,
)

pytestmark = pytest.mark.slow  # tunes, builds or starts processes: left out of the fast tier


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("127.0.0.1:9190", "127.0.0.1", 9190),
        ("tracker.example.org:1", "tracker.example.org", 1),
        ("localhost:65535", "localhost", 65535),
        ("  10.0.0.7:9000\n", "10.0.0.7", 9000),
        ("tracker.example.org", "tracker.example.org", DEFAULT_TRACKER_PORT),
        ("127.0.0.1", "127.0.0.1", 9190),
    ],
)
def test_parse_tracker(text, host, port):
    address = parse_tracker(text)
    assert address == TrackerAddress(host, port)
    assert str(address) == f"{host}:{port}"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "expected HOST:PORT"),
        ("   ", "expected HOST:PORT"),
        (":9190", "expected HOST:PORT"),
        ("host:abc", "port 'abc' is not a number"),
        ("host:", "port '' is not a number"),
        ("host:91.5", "port '91.5' is not a number"),
        ("host:0", "port 0 is out of range"),
        ("host:65536", "port 65536 is out of range"),
        ("host:-1", "port -1 is out of range"),
    ],
)
def test_parse_tracker_malformed(text, reason):
    with pytest.raises(TrackerError) as info:
        parse_tracker(text)
    message = str(info.value)
    assert f"malformed tracker address {text!r}" in message
    assert reason in message


def test_tracker_from_env(monkeypatch):
    monkeypatch.delenv("TVM_TRACKER_HOST", raising=False)
    monkeypatch.delenv("TVM_TRACKER_PORT", raising=False)
    assert tracker_from_env() is None
    monkeypatch.setenv("TVM_TRACKER_HOST", "10.1.2.3")
    assert tracker_from_env() == TrackerAddress("10.1.2.3", DEFAULT_TRACKER_PORT)
    monkeypatch.setenv("TVM_TRACKER_PORT", "9300")
    assert tracker_from_env() == TrackerAddress("10.1.2.3", 9300)
    monkeypatch.setenv("TVM_TRACKER_PORT", "nine")
    with pytest.raises(TrackerError, match="'10.1.2.3:nine'"):
        tracker_from_env()


@pytest.fixture
def nothing_listening() -> TrackerAddress:
    """A port on 127.0.0.1 that was just free (nothing listens there)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return TrackerAddress("127.0.0.1", sock.getsockname()[1])


@pytest.mark.parametrize(
    "ask",
    [
        lambda address: queue_status(address, timeout_s=2),
        lambda address: workers_for_key(address, RPC_KEY),
        lambda address: wait_for_key(address, RPC_KEY, timeout_s=30),
    ],
    ids=["queue_status", "workers_for_key", "wait_for_key"],
)
def test_unreachable_tracker_fails_fast(ask, nothing_listening):
    start = time.monotonic()
    with pytest.raises(TrackerError) as info:
        ask(nothing_listening)
    assert time.monotonic() - start < 5
    assert f"cannot reach the RPC tracker at {nothing_listening}" in str(info.value)


def test_local_rpc_key_is_registered(local_rpc):
    status = queue_status(local_rpc.address)
    assert status["queue_info"][RPC_KEY]["pending"] == 0
    assert workers_for_key(local_rpc.address, RPC_KEY) == 1
    assert wait_for_key(local_rpc.address, RPC_KEY, timeout_s=2) == 1


def test_unknown_key_times_out_naming_the_key(local_rpc):
    start = time.monotonic()
    with pytest.raises(TrackerError) as info:
        wait_for_key(local_rpc.address, "no-such-key", timeout_s=2)
    elapsed = time.monotonic() - start
    assert 2 <= elapsed < 6
    message = str(info.value)
    assert "no worker with RPC key 'no-such-key'" in message
    assert str(local_rpc.address) in message
    assert f"keys there: {RPC_KEY}" in message
    assert workers_for_key(local_rpc.address, "no-such-key") == 0


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _in_sessions(sessions: set[int]) -> list[list[str]]:
    """Live processes whose session is one of ``sessions``, wherever they were reparented."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if os.getsid(proc.pid) in sessions and _alive(proc):
                found.append(proc.info["cmdline"])
        except (ProcessLookupError, PermissionError):
            continue
    return found


def test_local_rpc_exit_ends_all_its_processes():
    # The tracker serves in its own process; the worker forks one process per session;
    # every one of them must end with the LocalRPC, wherever it was reparented to. Each started
    # process leads a session of its own, which its children share. Ports are not evidence:
    # another test's worker may take a freed one.
    me = psutil.Process()
    before = set(me.children(recursive=True))
    with LocalRPC(key="measure-exit") as rpc:
        started = [p for p in me.children(recursive=True) if p not in before]
        servers = queue_status(rpc.address)["server_info"]
        sessions = {os.getsid(p.pid) for p in started}
        assert len(_in_sessions(sessions)) >= 2
    assert len(started) >= 2  # the tracker and the worker
    assert len(servers) == 1
    assert os.getsid(0) not in sessions

    deadline = time.monotonic() + 5
    while _in_sessions(sessions) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _in_sessions(sessions) == []
    with pytest.raises(TrackerError):
        queue_status(rpc.address, timeout_s=2)


def test_local_rpc_moves_its_tracker_off_a_port_taken_meanwhile():
    """The free port chosen for the tracker is taken before the tracker binds it (another run on the machine):
    the listener there is not mistaken for a tracker, and the tracker starts again on another free port."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen(1)
        taken = squatter.getsockname()[1]
        rpc = LocalRPC(key="measure-moved")
        rpc.address = TrackerAddress("127.0.0.1", taken)
        with rpc:
            assert rpc.address.port != taken
            assert workers_for_key(rpc.address, "measure-moved") == 1
    with pytest.raises(TrackerError, match="did not start"):
        with socket.socket() as squatter:
            squatter.bind(("127.0.0.1", 0))
            squatter.listen(1)
            with LocalRPC(key="measure-fixed", port=squatter.getsockname()[1]):
                pass  # a port given by the caller is never moved

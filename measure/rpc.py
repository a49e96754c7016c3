"""TVM RPC tracker and workers: parsing addresses, starting local ones, waiting for a key.

A worker is TVM's RPC server registered with a tracker under an RPC key. The
server runs the code it is sent by design: it binds to 127.0.0.1 unless told
otherwise, and must only be exposed to trusted networks.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass

from .lifetime import popen

DEFAULT_TRACKER_PORT = 9190
LOCAL_KEY = "local"
_START_S = 120.0  # tracker listening, workers registered: TVM imports slowly on a loaded machine


class TrackerError(RuntimeError):
    """A tracker that cannot be parsed, reached, or that has no worker for a key."""


@dataclass(frozen=True)
class TrackerAddress:
    """Where a TVM RPC tracker listens."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_tracker(text: str) -> TrackerAddress:
    """Parse ``HOST:PORT`` (or ``HOST``, port 9190).

    Raises
    ------
    TrackerError
        For an empty host or a port that is not an integer in 1..65535.
    """
    host, sep, port_text = text.strip().rpartition(":")
    if not sep:
        host, port_text = text.strip(), str(DEFAULT_TRACKER_PORT)
    if not host:
        raise TrackerError(f"malformed tracker address {text!r}: expected HOST:PORT")
    try:
        port = int(port_text)
    except ValueError:
        raise TrackerError(f"malformed tracker address {text!r}: port {port_text!r} is not a number") from None
    if not 0 < port < 65536:
        raise TrackerError(f"malformed tracker address {text!r}: port {port} is out of range")
    return TrackerAddress(host, port)


def tracker_from_env() -> TrackerAddress | None:
    """The tracker named by ``TVM_TRACKER_HOST`` / ``TVM_TRACKER_PORT``, if set."""
    host = os.environ.get("TVM_TRACKER_HOST")
    if not host:
        return None
    return parse_tracker(f"{host}:{os.environ.get('TVM_TRACKER_PORT', DEFAULT_TRACKER_PORT)}")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def ask_tracker(address: TrackerAddress, message: list, timeout_s: float = 5.0) -> list | int:
    """Send one message of TVM's tracker protocol on a new connection; return the tracker's answer.

    The message leaves in one write and the connection acknowledges at once
    (``TCP_NODELAY``, ``TCP_QUICKACK``): TVM's own client and the tracker each
    write a message's length and body apart, and Nagle's algorithm against a
    delayed acknowledgement then costs about 40 ms per direction.

    Raises
    ------
    OSError
        When the tracker cannot be reached or answered nothing within ``timeout_s``
        seconds (``TimeoutError``), or broke the connection.
    TrackerError
        When the peer is not a TVM RPC tracker.
    """
    from tvm.rpc import base

    quickack = getattr(socket, "TCP_QUICKACK", None)  # Linux only
    with socket.create_connection((address.host, address.port), timeout=timeout_s) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
        if struct.unpack("<i", base.recvall(sock, 4))[0] != base.RPC_TRACKER_MAGIC:
            raise TrackerError(f"{address} is not a TVM RPC tracker")
        data = json.dumps(message).encode()
        sock.sendall(struct.pack("<i", len(data)) + data)
        if quickack is not None:
            sock.setsockopt(socket.IPPROTO_TCP, quickack, 1)
        size = struct.unpack("<i", base.recvall(sock, 4))[0]
        if quickack is not None:
            sock.setsockopt(socket.IPPROTO_TCP, quickack, 1)
        return json.loads(base.recvall(sock, size))


def queue_status(address: TrackerAddress, timeout_s: float = 5.0) -> dict:
    """The tracker's summary (``queue_info`` per key, ``server_info``).

    Raises
    ------
    TrackerError
        When the tracker cannot be reached within ``timeout_s`` seconds.
    """
    from tvm.rpc import base

    try:
        answer = ask_tracker(address, [base.TrackerCode.SUMMARY], timeout_s)
    except OSError as err:
        raise TrackerError(f"cannot reach the RPC tracker at {address}: {err}") from None
    if not isinstance(answer, list) or answer[0] != base.TrackerCode.SUCCESS:
        raise TrackerError(f"the RPC tracker at {address} answered {answer!r} to a summary request")
    return dict(answer[1])


def workers_for_key(address: TrackerAddress, key: str) -> int:
    """How many workers are registered on the tracker under ``key`` (free or busy)."""
    servers = queue_status(address).get("server_info", [])
    return sum(1 for server in servers if server.get("key", "").split(":", 1)[-1] == key)


def wait_for_key(address: TrackerAddress, key: str, timeout_s: float = 60.0) -> int:
    """Wait until at least one worker is registered under ``key``; return how many.

    Raises
    ------
    TrackerError
        When the tracker is unreachable, or no worker has the key after ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        count = workers_for_key(address, key)
        if count:
            return count
        if time.monotonic() > deadline:
            keys = sorted(queue_status(address).get("queue_info", {}))
            raise TrackerError(
                f"no worker with RPC key {key!r} on the tracker at {address} after {timeout_s:.0f} s "
                f"(keys there: {', '.join(keys) or 'none'})"
            )
        time.sleep(0.2)


def _python_module(args: list[str], cpus: set[int] | None = None) -> subprocess.Popen:
    # Bound to this process (it ends when this process ends, however) and a process group
    # of its own: TVM's tracker and server serve from a child process (and fork one per
    # session), which must end with it.
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if cpus:  # a worker pinned to some cores runs its kernels on those (measure.threads)
        env["TVM_NUM_THREADS"] = str(len(cpus))
    return popen(
        [sys.executable, "-m", *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
    )


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


class LocalRPC:
    """A TVM RPC tracker and ``workers`` workers (:mod:`measure.worker`) on 127.0.0.1, as child processes.

    Use as a context manager: the processes start on enter (once the workers are
    registered under ``key``) and are terminated on exit.

    Parameters
    ----------
    key : str
        The RPC key the workers register under.
    workers : int
        How many workers to start.
    port : int, optional
        The tracker's port (default: a free one).
    worker_cpus : list of set of int, optional
        CPU cores each worker (and the sessions it forks) is pinned to, one set per worker.
    """

    def __init__(self, key: str = LOCAL_KEY, workers: int = 1, port: int | None = None,
                 worker_cpus: list[set[int]] | None = None) -> None:
        self.key = key
        self.workers = workers
        self.address = TrackerAddress("127.0.0.1", port or free_port())
        self._fixed_port = port is not None
        self.worker_cpus = worker_cpus
        self._procs: list[subprocess.Popen] = []
        self.worker_processes: list[subprocess.Popen] = []

    def __enter__(self) -> LocalRPC:
        try:
            return self._start()
        except BaseException:
            self.__exit__()  # what was started ends with the failed start
            raise

    def _start(self) -> LocalRPC:
        self.start_tracker()
        host, port = self.address.host, str(self.address.port)
        for i in range(self.workers):
            cpus = self.worker_cpus[i] if self.worker_cpus else None
            proc = _python_module(["measure.worker", "--tracker", f"{host}:{port}", "--key", self.key, "--host", host],
                                  cpus)
            self._procs.append(proc)
            self.worker_processes.append(proc)
        deadline = time.monotonic() + _START_S
        while workers_for_key(self.address, self.key) < self.workers:
            exited = [p.returncode for p in self.worker_processes if p.poll() is not None]
            if exited:
                raise TrackerError(f"a local worker exited (status {exited[0]}) before it registered with the "
                                   f"tracker at {self.address}")
            if time.monotonic() > deadline:
                raise TrackerError(f"the local workers did not register with the tracker at {self.address} "
                                   f"within {_START_S:.0f} s")
            time.sleep(0.2)
        return self

    def start_tracker(self) -> None:
        """Start the tracker on ``address`` (again, after :meth:`stop_tracker`); wait until it listens.

        A free port can be taken by another process between the moment it was
        chosen and the moment the tracker binds it (concurrent runs on one machine):
        a tracker that exits before it listens is started again on a new free port,
        up to three times, unless the port was given or workers already use it.

        Raises
        ------
        TrackerError
            When the tracker exits before it listens or does not listen within 120 s.
        """
        for attempt in range(3):
            host, port = self.address.host, str(self.address.port)
            self.tracker_process = _python_module(
                ["measure.tracker", "--host", host, "--port", port, "--port-end", str(self.address.port + 1)]
            )
            self._procs.append(self.tracker_process)
            if _wait_listening(self.address, self.tracker_process, timeout_s=_START_S):
                return
            self._procs.remove(self.tracker_process)
            if self._fixed_port or self.worker_processes or attempt == 2:
                break  # a given port, or a restart the running workers reconnect to: the port cannot move
            self.address = TrackerAddress(host, free_port())
        raise TrackerError(f"the local RPC tracker did not start on {self.address} "
                           f"(status {self.tracker_process.returncode})")

    def stop_tracker(self) -> None:
        """Stop the tracker (its whole process group); the workers keep running and try to reconnect."""
        _stop(self.tracker_process)
        self._procs.remove(self.tracker_process)

    def __exit__(self, *exc) -> None:
        for proc in reversed(self._procs):
            _signal_group(proc, signal.SIGTERM)
        for proc in self._procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc, signal.SIGKILL)  # what SIGTERM left of the group
            proc.wait()
        self._procs.clear()
        self.worker_processes.clear()


def _stop(proc: subprocess.Popen) -> None:
    _signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc, signal.SIGKILL)
    proc.wait()


def _wait_listening(address: TrackerAddress, proc: subprocess.Popen, timeout_s: float) -> bool:
    """Whether ``proc`` is alive and a TVM tracker answers on ``address`` within ``timeout_s`` (False: it exited).

    The tracker protocol is spoken, not just a connection made: another process
    listening on the port is not taken for the tracker.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            return False
        try:
            queue_status(address, timeout_s=1.0)
            return proc.poll() is None
        except TrackerError:
            if time.monotonic() > deadline:
                raise TrackerError(f"the local RPC tracker did not start on {address} within {timeout_s:.0f} s"
                                   ) from None
            time.sleep(0.1)

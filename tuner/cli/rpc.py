"""``tune tracker``, ``tune worker`` and ``tune workers``: TVM's RPC tracker and servers.

A worker (:mod:`measure.worker`) is TVM's RPC server registered with a tracker
under an RPC key. It runs the code it is sent: bind it to 127.0.0.1 (the default)
or to a network you trust.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Annotated

import typer

from .errors import fail

TRACKER_HELP = "Tracker HOST:PORT. Env: TVM_TRACKER_HOST, TVM_TRACKER_PORT."


def _tracker_arg(tracker: str | None) -> str:
    from measure import tracker_from_env

    if tracker:
        return tracker
    env_tracker = tracker_from_env()
    if env_tracker:
        return str(env_tracker)
    fail("no tracker given: pass --tracker HOST:PORT or set TVM_TRACKER_HOST")
    raise AssertionError  # unreachable


def _serve(args: list[str], restart: bool = False) -> None:
    """Run a Python module in the foreground until it exits or we get SIGINT/SIGTERM.

    With ``restart``, a process that dies on its own (killed, out of memory) is
    started again after a second. The process (and its own children) ends when
    this one ends, whatever signal ends it. Its standard error, TVM's native log
    lines included, is the terminal's: operators read a service's log.
    """
    from measure.lifetime import popen

    from . import native_log

    native_log.restore()

    stopping = []
    proc = None

    def stop(signum, _frame):
        stopping.append(signum)
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    while True:
        proc = popen([sys.executable, "-m", *args], start_new_session=True)  # ends with this process
        if stopping:
            os.killpg(proc.pid, signal.SIGTERM)
        code = proc.wait()
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its own children
        except ProcessLookupError:
            pass
        if stopping or not restart:
            raise typer.Exit(0 if stopping or code == 0 else code)
        typer.echo(f"tune worker: the worker process exited with code {code}; starting it again", err=True)
        time.sleep(1.0)


def tracker_command(
    host: Annotated[str, typer.Option(help="Address to bind; 127.0.0.1 keeps it on this machine.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 9190,
) -> None:
    """Run TVM's RPC tracker (logs on stderr; SIGINT or SIGTERM stops it)."""
    if not 0 < port < 65536:
        fail(f"--port {port} is out of range")
    _serve(["measure.tracker", "--host", host, "--port", str(port), "--port-end", str(port + 1)])


def worker_command(
    tracker: Annotated[str | None, typer.Option(help=TRACKER_HELP)] = None,
    key: Annotated[str, typer.Option(envvar="TVM_TRACKER_KEY", help="RPC key naming this device's pool.")] = "local",
    host: Annotated[str, typer.Option(
        help="Address to bind. The worker runs any code it is sent: expose it only to trusted "
        "networks.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="First port to try for the worker's sessions.")] = 9090,
) -> None:
    """Run a measurement worker: a TVM RPC server registered with the tracker under KEY.

    SECURITY: the worker executes the code it receives (that is how kernels are
    measured). It binds to 127.0.0.1 unless told otherwise; expose it only to
    trusted networks. A kernel that crashes its session does not end the worker,
    and a worker process that dies is started again.
    """
    from measure import parse_tracker, queue_status

    if not 0 < port < 65536:
        fail(f"--port {port} is out of range")
    address = parse_tracker(_tracker_arg(tracker))
    queue_status(address)  # an unreachable tracker is an error now, not a silent retry loop
    _serve(["measure.worker", "--tracker", str(address), "--key", key, "--host", host, "--port", str(port),
            "--port-end", str(min(port + 100, 65536))], restart=True)


def workers_command(
    tracker: Annotated[str | None, typer.Option(help=TRACKER_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """List the tracker's RPC keys with their free and pending counts, and the registered workers."""
    from rich.console import Console
    from rich.table import Table

    from measure import parse_tracker, queue_status

    status = queue_status(parse_tracker(_tracker_arg(tracker)))
    if as_json:
        sys.stdout.write(json.dumps(status) + "\n")
        return
    table = Table(title="RPC keys")
    for col in ("key", "workers", "free", "pending"):
        table.add_column(col)
    servers = status.get("server_info", [])
    for key, queue in sorted(status.get("queue_info", {}).items()):
        n = sum(1 for s in servers if s.get("key", "").split(":", 1)[-1] == key)
        table.add_row(key, str(n), str(queue.get("free", 0)), str(queue.get("pending", 0)))
    Console().print(table)

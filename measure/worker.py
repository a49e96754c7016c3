"""A measurement worker: TVM's RPC server, registered with a tracker, that survives crashing kernels.

TVM's RPC server serves each session in a forked process. When that process dies
(a kernel that segfaults), TVM's listening loop raises and the server stays up
without serving or being registered. This module runs TVM's own listening loop
and re-enters it after such a failure (and after a tracker that stayed away
longer than TVM's 60 s reconnection window), on the same socket, so the worker
registers again under the same address.

Its connections write small messages at once and acknowledge at once
(``TCP_NODELAY``, ``TCP_QUICKACK``): TVM writes a message's length and body
apart, and Nagle's algorithm against delayed acknowledgements would hold each
such message about 40 ms, when the worker registers again after a session and
during the session's handshake.

The worker runs any code it is sent: it binds to 127.0.0.1 unless told otherwise
and must only be exposed to trusted networks.

Run as ``python -m measure.worker --tracker HOST:PORT --key KEY [--host H] [--port P]``.
"""

from __future__ import annotations

import argparse
import logging
import socket
import time

from . import held_tensors
from .lifetime import bind_forks, die_on_sigint

logger = logging.getLogger("measure.worker")

_QUICKACK = getattr(socket, "TCP_QUICKACK", None)  # Linux only


class _PromptSocket(socket.socket):
    """A connection that sends at once and acknowledges what it receives at once."""

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        if _QUICKACK is not None:  # the kernel clears it again: set before every read
            self.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
        return super().recv(bufsize, flags)


def _prompt_tracker_connections() -> None:
    """Make the tracker connections of TVM's listening loop prompt.

    The loop opens them with ``tvm.rpc.base.connect_with_retry``, which this replaces
    (in this process only) by the same call returning a :class:`_PromptSocket`.
    """
    from tvm.rpc import base

    connect = base.connect_with_retry
    if getattr(connect, "prompt", False):
        return

    def prompt_connect(addr, *args, **kwargs):
        sock = connect(addr, *args, **kwargs)
        prompt = _PromptSocket(sock.family, sock.type, sock.proto, sock.detach())
        prompt.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return prompt

    prompt_connect.prompt = True
    base.connect_with_retry = prompt_connect


def bind(host: str, port: int, port_end: int) -> tuple[socket.socket, int]:
    """A listening socket on the first free port of ``[port, port_end)``; the connections it accepts send at once.

    Raises
    ------
    OSError
        When no port of the range is free.
    """
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # inherited by accepted connections (Linux)
    for candidate in range(port, port_end):
        try:
            sock.bind((host, candidate))
        except OSError:
            continue
        sock.listen(1)
        return sock, candidate
    sock.close()
    raise OSError(f"no free port in [{port}, {port_end}) on {host}")


def serve(tracker: tuple[str, int], key: str, host: str = "127.0.0.1", port: int = 9090,
          port_end: int = 9199) -> None:
    """Serve RPC sessions for ``key`` forever (until a signal ends the process)."""
    from tvm.rpc import (
        server as tvm_server,  # TVM's loop: register, accept, fork a session
    )

    _prompt_tracker_connections()
    held_tensors.register()  # before the sessions fork: each has its table
    bind_forks()  # a session's process ends with the worker
    sock, bound = bind(host, port, port_end)
    logger.info("worker for RPC key %r on %s:%d, tracker %s:%d", key, host, bound, *tracker)
    while True:
        try:
            tvm_server._listen_loop(sock, bound, key, tracker, None, None)
        except RuntimeError as err:  # a session's process died, or the tracker stayed away
            logger.warning("serving again after: %s", err)
            time.sleep(0.1)


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and serve (SIGINT or SIGTERM ends the process at once)."""
    die_on_sigint()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tracker", required=True, help="tracker HOST:PORT")
    parser.add_argument("--key", required=True, help="RPC key of this device's pool")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (trusted networks only)")
    parser.add_argument("--port", type=int, default=9090, help="first port to try")
    parser.add_argument("--port-end", type=int, default=9199, help="end of the port range")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    host, _, port = args.tracker.rpartition(":")
    serve((host, int(port)), args.key, args.host, args.port, args.port_end)


if __name__ == "__main__":
    main()

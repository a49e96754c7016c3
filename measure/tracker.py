"""A TVM RPC tracker served by this process itself.

TVM's ``tvm.exec.rpc_tracker`` serves from a second process (a ``PopenWorker``)
that outlives it when it is killed. Here TVM's tracker loop runs in a thread of
this process: ending the process (any signal) ends the tracker, and the process
imports TVM once instead of twice.

Run as ``python -m measure.tracker --host HOST --port PORT --port-end END``.
"""

from __future__ import annotations

import argparse
import logging

from .lifetime import die_on_sigint


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and serve until a signal ends the process.

    Raises
    ------
    ValueError
        When no port of ``[port, port_end)`` is free.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to bind")
    parser.add_argument("--port", type=int, default=9190, help="first port to try")
    parser.add_argument("--port-end", type=int, default=9199, help="end of the port range")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    die_on_sigint()  # the serving thread never ends: a signal ends the process
    from tvm.rpc.tracker import PopenTrackerServerState

    PopenTrackerServerState(args.host, args.port, args.port_end).thread.join()


if __name__ == "__main__":
    main()

"""TVM's native log lines kept off the user's terminal.

TVM's C++ code writes warnings (a CUDA version on a CPU-only machine, ``BlockBuilder
destroyed with remaining blocks!``) straight to file descriptor 2, out of reach of
Python's logging. :func:`divert` points descriptor 2 at an unnamed temporary file
and ``sys.stderr`` at a duplicate of the real standard error, so the command's own
output (errors, notes, the progress display) still reaches the terminal. Child
processes inherit descriptor 2, so their native output is hidden too, unless a
command hands it back with :func:`restore` (the RPC services, whose logs operators
read). On an unexpected internal error :func:`save_tail` keeps the end of the
captured log in a file the error line names.

``TUNE_DEBUG=1`` leaves standard error as it is.
"""

from __future__ import annotations

import io
import os
import sys
import tempfile

# Bytes of the captured log that :func:`save_tail` keeps.
TAIL_BYTES = 64 * 1024

_kept: list[int] = []  # the duplicate of the real standard error, once diverted
_captured: list[bool] = []  # [True] while descriptor 2 is the captured log


def _is_process_stderr() -> bool:
    """Whether ``sys.stderr`` is this process's own descriptor 2 (not a test's capture)."""
    if sys.stderr is None or sys.stderr is not sys.__stderr__:
        return False
    try:
        return sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):
        return False


def divert() -> bool:
    """Send descriptor 2 to a temporary file and ``sys.stderr`` to the real standard error.

    Does nothing (returns False) with ``TUNE_DEBUG`` set, when already diverted, or
    when ``sys.stderr`` is not the process's descriptor 2 (an in-process test's capture).
    The file has no name: it leaves nothing behind, however the process ends.
    """
    if os.environ.get("TUNE_DEBUG") or _kept or not _is_process_stderr():
        return False
    sys.stderr.flush()
    log = tempfile.TemporaryFile(prefix="tune-native-", suffix=".log")
    kept = os.dup(2)
    os.dup2(log.fileno(), 2)
    log.close()  # descriptor 2 holds the file now
    _kept.append(kept)
    _captured.append(True)
    encoding = sys.stderr.encoding or "utf-8"
    sys.stderr = io.TextIOWrapper(io.FileIO(kept, "w", closefd=False), encoding=encoding,
                                  errors="backslashreplace", line_buffering=True, write_through=True)
    return True


def restore() -> None:
    """Send descriptor 2 to the real standard error again (services whose native logs operators read)."""
    if _captured:
        sys.stderr.flush()
        os.dup2(_kept[0], 2)
        _captured.clear()


def save_tail() -> str | None:
    """Copy the end of the captured native log into a file that stays; its path, or None when nothing was captured."""
    if not _captured:
        return None
    try:
        size = os.fstat(2).st_size
        if not size:
            return None
        start = max(0, size - TAIL_BYTES)
        tail = os.pread(2, size - start, start)
        fd, path = tempfile.mkstemp(prefix="tune-native-", suffix=".log")
        with os.fdopen(fd, "wb") as out:
            out.write(tail)
        return path
    except OSError:
        return None

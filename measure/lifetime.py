"""Child processes that end when their parent ends, whatever signal ended the parent.

A process killed with SIGKILL (an out-of-memory kill, ``systemctl kill -s KILL``)
runs no cleanup: the children it started are re-parented and live on, still
serving and still registered with a tracker. Every process this product starts
is bound to its parent here, so that it is killed (SIGKILL) when the parent ends:

* :func:`popen` starts a child bound to the calling process;
* :func:`bind_forks` binds the children that this process forks with ``os.fork``
  (TVM's RPC server forks one process per session);
* :func:`bind_tvm_pools` makes TVM's ``PopenWorker`` (the build and run pools)
  start its processes with :func:`popen`.

A Ctrl-C in a terminal sends SIGINT to the whole foreground process group, these
children included. Each child Python process calls :func:`die_on_sigint` first, so
SIGINT ends it at once and quietly: no ``KeyboardInterrupt``, no atexit handlers
(whose tracebacks a second interrupt would print), while the parent stops in order.

The tracker (:mod:`measure.tracker`) serves in its own process, with no child.

On Linux the kernel delivers the signal (``prctl(PR_SET_PDEATHSIG)``), even while
the child runs native code; the child then checks its parent's pid, so a parent
that died while the child started is caught too. Elsewhere a thread of the child
polls its parent's pid.

``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child ends, not the
process. :func:`popen` therefore forks from one daemon thread that lives as long
as the process; :func:`bind_forks` covers forks from the thread that calls
``os.fork`` (TVM's server forks from its main thread).
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable
from concurrent.futures import Future

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_POLL_S = 0.2  # the portable watchdog's period


def _load_prctl() -> Callable | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_prctl = _load_prctl()  # looked up before any fork: a forked child only calls it


def _watch(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(_POLL_S)
    os.kill(os.getpid(), signal.SIGKILL)


def die_with(parent_pid: int) -> None:
    """Make the calling process end (SIGKILL) when process ``parent_pid``, its parent, ends.

    Call it in the child, as early as possible. When the parent has already ended
    (the child's parent pid is no longer ``parent_pid``), the calling process is
    killed at once.
    """
    if _prctl is not None and _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
        if os.getppid() != parent_pid:  # the parent ended before the signal was armed
            os.kill(os.getpid(), signal.SIGKILL)
        return
    threading.Thread(target=_watch, args=(parent_pid,), name="die-with-parent", daemon=True).start()


def die_on_sigint() -> None:
    """Let SIGINT end the calling process at once, as the system's default action does.

    No ``KeyboardInterrupt`` is raised and no atexit handler runs. Call it first in a
    child Python process (a pool's initializer, a service's ``main``).
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class _Spawner:
    """One daemon thread that starts every bound child, so that no child's parent thread ends before the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def call(self, fn: Callable[[], subprocess.Popen]) -> subprocess.Popen:
        with self._lock:
            if self._thread is None or self._pid != os.getpid():  # a forked process has no such thread
                self._jobs = queue.SimpleQueue()
                self._thread = threading.Thread(target=self._serve, args=(self._jobs,), name="child-spawner",
                                                daemon=True)
                self._thread.start()
                self._pid = os.getpid()
        if threading.current_thread() is self._thread:
            return fn()
        done: Future = Future()
        self._jobs.put((fn, done))
        return done.result()

    @staticmethod
    def _serve(jobs: queue.SimpleQueue) -> None:
        while True:
            fn, done = jobs.get()
            try:
                done.set_result(fn())
            except BaseException as err:  # noqa: BLE001 - handed to the caller's thread
                done.set_exception(err)


_spawner = _Spawner()


def popen(args: list[str], preexec_fn: Callable[[], None] | None = None, **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(args, **kwargs)`` for a child that ends (SIGKILL) when this process ends.

    ``preexec_fn``, if given, runs in the child after it is bound.

    Raises
    ------
    OSError, subprocess.SubprocessError
        As ``subprocess.Popen`` does.
    """
    parent = os.getpid()

    def bind() -> None:
        die_with(parent)
        if preexec_fn is not None:
            preexec_fn()

    # preexec_fn while other threads run is safe here: the hook only calls prctl and getppid (looked up before the fork)
    return _spawner.call(lambda: subprocess.Popen(args, preexec_fn=bind, **kwargs))  # noqa: PLW1509


_forking_pid = [0]


def bind_forks() -> None:
    """Make every child that this process forks (``os.fork``, ``multiprocessing``) end when this process ends.

    The fork must come from a thread that lives as long as the process (the main
    thread). Calling it again does nothing.
    """
    if _forking_pid[0]:
        return
    _forking_pid[0] = os.getpid()

    def before() -> None:
        _forking_pid[0] = os.getpid()

    os.register_at_fork(before=before, after_in_child=lambda: die_with(_forking_pid[0]))


class _BoundSubprocess(types.ModuleType):
    """The ``subprocess`` module, except that ``Popen`` is :func:`popen`."""

    Popen = staticmethod(popen)

    def __getattr__(self, name: str):
        return getattr(subprocess, name)


def bind_tvm_pools() -> None:
    """Make TVM's ``PopenWorker`` processes (``PopenPoolExecutor``) end when this process ends.

    Replaces the ``subprocess`` module that ``tvm.support.popen_pool`` sees, in this
    process only. Calling it again does nothing.
    """
    from tvm.support import popen_pool

    if not isinstance(popen_pool.subprocess, _BoundSubprocess):
        popen_pool.subprocess = _BoundSubprocess("subprocess")

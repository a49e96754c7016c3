"""Contenders timed each in a process of its own: built, checked against the reference, then timed on request.

A contender is a build function that returns a call (``call()`` runs it once and
returns its outputs: numpy arrays, or objects with a ``numpy()`` method), such as
:func:`tuner.peers.layer_peer` or :func:`tuner.compile.local_program` bound to its
arguments with ``functools.partial`` (the build is pickled into a ``spawn``ed process,
so it must be a module-level function with picklable arguments).

:class:`Contenders` starts the processes one after another: each builds its
contender, runs it once (the build and this first call are its compile time),
checks the outputs against the reference (:func:`tuner.compile.verify`) and only
then is ready to be timed. A contender whose outputs differ is reported as
``wrong result`` with its largest error and never timed; one that fails to build or
run is ``failed`` with the error's first line. Timing is by rounds
(:meth:`Contenders.time_round`), so a caller interleaves them with its own contenders
(``tune run`` times them between its programs' repeats): each ready process runs one
repeat on request, at least ``min_repeat_s`` long, after ``settle_s`` seconds of idle
(so the previous contender's thread pool has stopped spinning, see
:func:`bench.common.median_times`). A process waits blocked on its pipe between
requests: its threads sleep, and no two contenders' thread pools share a process.

With ``cold_bytes`` > 0 every timed call follows a write of that many bytes (a cache
flush: weights come from memory, as in a model whose other layers evicted them), and
only the calls are timed.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

#: seconds a contender may take to build, compile and check
BUILD_TIMEOUT_S = 1800.0
#: seconds one timed repeat may take
REPEAT_TIMEOUT_S = 600.0


@dataclass
class ContenderResult:
    """One contender's outcome.

    Attributes
    ----------
    name : str
    status : str
        ``ok`` (checked, then timed), ``wrong result`` (outputs differ from the
        reference: not timed), ``failed`` (did not build or run: not timed).
    times_s : list of float
        Seconds per call of each timed repeat.
    compile_s : float or None
        Seconds of the build and the first call (the compile, for a compiling contender).
    max_abs_error : float or None
        Largest absolute difference from the reference (None when not compared).
    error : str
        Why it is not timed (empty when ``ok``).
    """

    name: str
    status: str = "ok"
    times_s: list[float] = field(default_factory=list)
    compile_s: float | None = None
    max_abs_error: float | None = None
    error: str = ""

    @property
    def median_s(self) -> float | None:
        """Median seconds per call over the timed repeats (None when not timed)."""
        return float(np.median(self.times_s)) if self.times_s and self.status == "ok" else None

    def as_json(self) -> dict:
        """Plain JSON values, the median included."""
        return {"name": self.name, "status": self.status, "median_s": self.median_s, "repeats": len(self.times_s),
                "compile_s": self.compile_s, "max_abs_error": self.max_abs_error, "error": self.error}


def _serve(conn, build: Callable, reference: tuple[np.ndarray, ...], cold_bytes: int, min_repeat_s: float) -> None:
    """The contender's process: build, check, then one timed repeat per ``"repeat"`` message until ``"stop"``.

    Its standard output and error go to ``os.devnull``: exporters and compilers print
    progress there, and the caller's own output (``tune run --json``) must stay its own.
    """
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    from extract.imported import message_line

    from .compile import VerificationError, verify

    try:
        start = time.perf_counter()
        call = build()
        outputs = call()
        compile_s = time.perf_counter() - start
    except Exception as exc:  # noqa: BLE001 - any failure of a contender is reported, not raised
        conn.send(("failed", None, None, message_line(exc)[:300]))
        return
    try:
        err = verify(tuple(o.numpy() if hasattr(o, "numpy") else np.asarray(o) for o in outputs), reference)
    except VerificationError as exc:
        conn.send(("wrong result", compile_s, exc.max_abs_error, str(exc)))
        return
    flush = np.zeros(max(cold_bytes, 0) // 8)
    start = time.perf_counter()
    flush += 1.0
    call()  # calls per repeat: as many as fill min_repeat_s, each with its flush
    number = max(1, int(min_repeat_s / max(time.perf_counter() - start, 1e-7)))
    conn.send(("ok", compile_s, err, ""))
    while conn.recv() == "repeat":
        total = 0.0
        for _ in range(number):
            if flush.size:
                flush += 1.0  # read and write every line: the weights leave the caches
            start = time.perf_counter()
            call()
            total += time.perf_counter() - start
        conn.send(total / number)


class Contenders:
    """Contenders in processes of their own, checked before they are timed (see the module docstring).

    ``builds`` maps each contender's name to its build function; ``reference`` holds the
    outputs every contender must reproduce (:func:`tuner.compile.verify`'s tolerances).
    :meth:`start` builds them; a context manager: the processes end on exit. ``results`` holds every contender's
    :class:`ContenderResult`, its times growing with each :meth:`time_round`.
    """

    def __init__(self, builds: dict[str, Callable], reference: tuple[np.ndarray, ...], cold_bytes: int = 0,
                 min_repeat_s: float = 0.05, settle_s: float = 0.3) -> None:
        self.builds = builds
        self.reference = tuple(np.asarray(r) for r in reference)
        self.cold_bytes = cold_bytes
        self.min_repeat_s = min_repeat_s
        self.settle_s = settle_s
        self.results: dict[str, ContenderResult] = {}
        self._live: dict[str, tuple] = {}

    def __enter__(self) -> Contenders:
        return self

    def start(self) -> None:
        """Start, build and check every contender, one after another; those that fail are not timed."""
        ctx = multiprocessing.get_context("spawn")
        for name, build in self.builds.items():  # one at a time: each compile has the cores to itself
            here, there = ctx.Pipe()
            proc = ctx.Process(target=_serve, args=(there, build, self.reference, self.cold_bytes,
                                                    self.min_repeat_s), name=f"contender-{name}")
            proc.start()
            there.close()
            result = ContenderResult(name)
            try:
                if not here.poll(BUILD_TIMEOUT_S):
                    raise TimeoutError(f"not ready after {BUILD_TIMEOUT_S:.0f} s")
                status, result.compile_s, result.max_abs_error, result.error = here.recv()
                result.status = status
            except (EOFError, OSError, TimeoutError) as exc:
                result.status, result.error = "failed", f"its process ended or hung ({exc or type(exc).__name__})"
            self.results[name] = result
            if result.status == "ok":
                self._live[name] = (proc, here)
            else:
                _end(proc, here)

    def time_round(self) -> None:
        """One timed repeat of every ready contender, one after the other, each after ``settle_s`` of idle."""
        for name, (proc, conn) in list(self._live.items()):
            time.sleep(self.settle_s)
            try:
                conn.send("repeat")
                if not conn.poll(REPEAT_TIMEOUT_S):
                    raise TimeoutError(f"a repeat took over {REPEAT_TIMEOUT_S:.0f} s")
                self.results[name].times_s.append(conn.recv())
            except (EOFError, OSError, TimeoutError) as exc:
                result = self.results[name]
                result.status, result.error = "failed", f"its process ended while timed ({exc or type(exc).__name__})"
                _end(proc, conn)
                del self._live[name]

    def __exit__(self, *exc) -> None:
        for proc, conn in self._live.values():
            _end(proc, conn)
        self._live.clear()


def _end(proc, conn) -> None:
    """Stop a contender's process: ask it, then terminate it if it does not exit within 10 s."""
    try:
        conn.send("stop")
    except (OSError, ValueError):
        pass
    conn.close()
    proc.join(10)
    if proc.is_alive():
        proc.terminate()
        proc.join(5)

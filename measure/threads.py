"""How many threads TVM's runtime runs a kernel on: one per physical core this process may use.

TVM's CPU thread pool (``src/runtime/threading_backend.cc``, ``MaxConcurrency``)
takes ``TVM_NUM_THREADS``, else ``OMP_NUM_THREADS``, else *half* of
``std::thread::hardware_concurrency()`` on x86, assuming two hardware threads per
core. Where a core has one hardware thread (many virtual machines' vCPUs) that
leaves half the machine idle, and the FMA microbenchmark of :mod:`measure.roofline`
runs at half the speed it reaches on every core, while numpy's BLAS uses them all
(see docs/decisions.md, "TVM's runtime on every physical core"). Every kernel we
time (tuning measurements, programs end to end, the roofline) would run on half the
cores its rivals use.

:func:`use_physical_cores` sets ``TVM_NUM_THREADS`` to the physical cores in this
process's CPU affinity mask unless the user set it or ``OMP_NUM_THREADS``. It must
run before the process's first parallel TVM kernel (the pool starts then); the
``measure`` package calls it on import, and child processes (RPC workers, build
pools) inherit the variable.
"""

from __future__ import annotations

import os

import psutil


def physical_cores() -> int:
    """Physical cores this process may run on: ``min(physical cores, CPUs in the affinity mask)``, at least 1."""
    try:
        allowed = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity API (macOS)
        allowed = os.cpu_count() or 1
    physical = psutil.cpu_count(logical=False) or allowed
    return max(1, min(physical, allowed))


def use_physical_cores() -> int:
    """Set ``TVM_NUM_THREADS`` to :func:`physical_cores` unless ``TVM_NUM_THREADS`` or ``OMP_NUM_THREADS`` is set.

    Returns the number of threads TVM's runtime will use.
    """
    for name in ("TVM_NUM_THREADS", "OMP_NUM_THREADS"):
        if os.environ.get(name, "").strip().isdigit() and int(os.environ[name]) > 0:
            return int(os.environ[name])
    threads = physical_cores()
    os.environ["TVM_NUM_THREADS"] = str(threads)
    return threads

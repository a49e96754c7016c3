"""Peak memory of a run: this process and every process it started, sampled in a thread.

A run's memory is spread over processes: ``tune`` itself (the model, its weights, the
candidate checks), the local RPC tracker and worker (and the worker's session
process, which holds a program's weights while it is timed) and the builders. The
figure that answers "how much memory does a run need" is the sum over those
processes at one moment; its largest value over the run is the peak.

Each process counts with its proportional set size (PSS, Linux's
``/proc/PID/smaps_rollup``): its private pages plus its share of the pages it
shares with others, so the shared libraries every process maps (TVM, PyTorch) and
the pages a forked session shares with its worker count once, not once per
process. Where PSS cannot be read (another OS), the resident set size is used.
The sum is sampled every ``interval_s`` seconds; a peak shorter than that may be
missed, so the report adds the kernel's own record of this process's largest
resident set (``getrusage``'s ``ru_maxrss``), which misses nothing.
"""

from __future__ import annotations

import os
import resource
from collections import Counter

import psutil

from .sampler import PeriodicSampler

DEFAULT_INTERVAL_S = 0.2


def _label(proc: psutil.Process) -> str:
    """A process's role: the module of ``python -m MODULE``, else its name."""
    try:
        cmd = proc.cmdline()
    except psutil.Error:
        return "?"
    if "-m" in cmd[:-1]:
        return cmd[cmd.index("-m") + 1]
    return proc.name()


def _bytes(proc: psutil.Process) -> int:
    try:
        return proc.memory_full_info().pss
    except (AttributeError, psutil.AccessDenied):
        return proc.memory_info().rss


def tree_memory(root: psutil.Process) -> Counter:
    """Bytes (PSS, else RSS) of ``root`` and its descendants now, summed by role (see :func:`_label`).

    A process that ends while it is read is left out.
    """
    by_role: Counter = Counter()
    for proc in [root, *root.children(recursive=True)]:
        try:
            by_role[_label(proc)] += _bytes(proc)
        except psutil.Error:
            continue
    return by_role


class MemorySampler(PeriodicSampler):
    """Samples the memory of this process and its descendants in a thread (a context manager).

    Attributes
    ----------
    peak_bytes : int
        Largest sum over the process tree of one sample (bytes, see the module docstring).
    peak_by_role : dict of str to int
        That sample's bytes by process role (``tuner``, ``measure.worker``, ...).
    """

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        super().__init__(interval_s)
        self.peak_bytes = 0
        self.peak_by_role: dict[str, int] = {}
        self._root = psutil.Process(os.getpid())

    def sample(self) -> None:
        """Take one sample now."""
        by_role = tree_memory(self._root)
        total = sum(by_role.values())
        if total > self.peak_bytes:
            self.peak_bytes, self.peak_by_role = total, dict(by_role)

    def report(self, weight_bytes: int) -> dict:
        """The run's memory as plain JSON values (bytes).

        ``peak_bytes`` and ``by_process`` (that peak by process role), ``weight_bytes``
        (the model's weights, float32 here), ``peak_to_weights`` (their ratio) and
        ``tune_max_rss_bytes`` (this process's largest resident set, from the kernel).
        """
        return {
            "peak_bytes": self.peak_bytes,
            "by_process": self.peak_by_role,
            "weight_bytes": int(weight_bytes),
            "peak_to_weights": self.peak_bytes / weight_bytes if weight_bytes else None,
            "tune_max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "interval_s": self.interval_s,
        }


def memory_line(report: dict) -> str:
    """One line for the run's summary: the peak, its ratio to the weights and the largest processes."""
    gb = 1e9
    roles = sorted(report["by_process"].items(), key=lambda kv: -kv[1])
    parts = ", ".join(f"{role} {b / gb:.2f}" for role, b in roles[:4])
    ratio = f" ({report['peak_to_weights']:.1f}x the weights' {report['weight_bytes'] / gb:.2f} GB)" \
        if report.get("peak_to_weights") else ""
    return f"peak memory {report['peak_bytes'] / gb:.2f} GB{ratio}: {parts} GB"

"""How busy the machine was while a run tuned and timed: the 1-minute load average.

On a machine whose cores are shared with other work, end-to-end timings are
slow and their ratios unreliable: a thread pool that spins (PyTorch's, TVM's)
loses more to a competing process than a single-threaded program does, so one
contender suffers more than another. The run samples ``os.getloadavg()``
(the kernel's exponentially damped count of runnable and uninterruptible
tasks over about one minute, see ``proc(5)``) while it tunes and while it
times, reports it beside the figures, and warns when it exceeded the cores the
run may use. The load average counts this run's own processes too (builders,
the measuring worker), so a value a little above the core count right after a
busy tuning phase is possible on a quiet machine; far above is other work.
"""

from __future__ import annotations

import os

from .sampler import PeriodicSampler

#: seconds between samples; the kernel updates the load average every 5 s
SAMPLE_INTERVAL_S = 5.0


def available_cpus() -> int:
    """The cores this process may run on (its CPU affinity), else ``os.cpu_count()``."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def load_1min() -> float | None:
    """The 1-minute load average now, or None where the platform has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


class LoadSampler(PeriodicSampler):
    """Samples the 1-minute load average in a background thread, while in its ``with`` block.

    One sample on entry, one every ``interval_s`` seconds, one on exit;
    ``samples`` holds them, ``max`` the largest (None without any).
    """

    def __init__(self, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        super().__init__(interval_s)
        self.samples: list[float] = []

    def sample(self) -> None:
        """Take one sample now."""
        value = load_1min()
        if value is not None:
            self.samples.append(value)

    @property
    def max(self) -> float | None:
        return max(self.samples) if self.samples else None


def load_report(tuning: LoadSampler | None, timing: LoadSampler | None, cpus: int | None = None) -> dict:
    """What the summary reports: ``tuning_max`` and ``timing`` (the largest 1-minute load
    average sampled in each phase, None when not sampled) and ``cpus`` (see :func:`available_cpus`)."""
    return {"tuning_max": tuning.max if tuning else None, "timing": timing.max if timing else None,
            "cpus": cpus if cpus is not None else available_cpus()}


def busy_warning(report: dict, threshold: float | None = None) -> str | None:
    """One line when a load average of ``report`` (:func:`load_report`) exceeded ``threshold``
    (default: its ``cpus``), else None."""
    limit = report["cpus"] if threshold is None else threshold
    busy = [f"{phase} {report[key]:.1f}" for phase, key in (("tuning", "tuning_max"), ("timing", "timing"))
            if report.get(key) is not None and report[key] > limit]
    if not busy:
        return None
    return (f"warning: the machine was busy (1-minute load average {', '.join(busy)} on {report['cpus']} cores): "
            "the figures may be slow and the ratios unreliable; rerun on a quiet machine")


def load_line(report: dict) -> str:
    """The load averages of ``report`` (:func:`load_report`) in one line, for the summary."""
    def fmt(value: float | None) -> str:
        return f"{value:.2f}" if value is not None else "-"

    return (f"load average (1 min): tuning max {fmt(report.get('tuning_max'))}, "
            f"timing {fmt(report.get('timing'))}, on {report['cpus']} cores")

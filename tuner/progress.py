"""What a run shows while it works: a line per batch and a spinner on long steps (stderr).

``Progress(quiet=True)`` shows nothing at all; errors are the CLI's business.
"""

from __future__ import annotations

import contextlib
import sys

from rich.console import Console

from tuner.search.stop import SearchStop


def fmt_us(seconds: float) -> str:
    """A latency in seconds as microseconds, without the unit: 4 significant figures below 10 ms
    (a kernel of tens of nanoseconds reads 0.03125, not 0.0), whole microseconds above."""
    us = seconds * 1e6
    return f"{us:.4g}" if abs(us) < 1e4 else f"{us:.0f}"


class Progress:
    """Progress display on standard error.

    Parameters
    ----------
    quiet : bool
        Show nothing.
    """

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.console = Console(file=sys.stderr, highlight=False)
        self._done = 0
        self._total = 0

    def note(self, message: str) -> None:
        """One line of information."""
        if not self.quiet:
            self.console.print(message, soft_wrap=True)

    @contextlib.contextmanager
    def status(self, message: str):
        """A spinner with ``message`` while the block runs."""
        if self.quiet or not self.console.is_terminal:
            if not self.quiet:
                self.console.print(f"{message} ...")
            yield
            return
        with self.console.status(message):
            yield

    def start_tuning(self, total_trials: int) -> None:
        """Tuning starts with a budget of ``total_trials`` measurements over all workloads."""
        self._done, self._total = 0, total_trials

    def batch(self, workload: str, done: int, total: int, best_gflops: float | None,
              best_s: float | None, batch_size: int) -> None:
        """A line per measured batch: workload, best GFLOP/s and latency, trials done of total."""
        self._done += batch_size
        if self.quiet:
            return
        perf = f"{best_gflops:8.2f} GFLOP/s" if best_gflops is not None else "       - GFLOP/s"
        lat = f"{fmt_us(best_s):>10} us" if best_s is not None else "         - us"
        self.console.print(
            f"[{self._done:>5}/{self._total}] {workload[:48]:<48} best {perf} {lat}  trials {done}/{total}",
            soft_wrap=True,
        )

    def kernel_done(self, workload: str, stop_reason: SearchStop, space_error: str | None, measured_now: int,
                    unspent: int) -> None:
        """A workload's search ended; ``unspent`` trials of its budget were not measured in this run.

        Counts the unspent trials as done, so the counter reaches its total, and says
        why a search ended early (its schedule space ran dry, or had no schedule at
        all, or other sessions on the database took the rest of its budget).  A
        resumed run that found nothing new to measure for a workload says
        nothing: the run that measured it said why it stopped.
        """
        self._done += max(unspent, 0)
        if not self.quiet and stop_reason == SearchStop.BUDGET_TAKEN:
            self.console.print(f"        {workload[:48]:<48} stopped early: other sessions took the rest of its "
                               "trials", soft_wrap=True)
        if self.quiet or stop_reason != SearchStop.SPACE_EXHAUSTED or (measured_now == 0 and not space_error):
            return
        why = f"no schedule space: {space_error}" if space_error else "every distinct schedule sampled was measured"
        self.console.print(f"        {workload[:48]:<48} stopped early: {why}", soft_wrap=True)

    def stop_tuning(self) -> None:
        """Tuning is over."""

"""Confirming a kernel's leaders: re-measure its fastest candidates before one is chosen.

A search keeps the candidate whose measurement was the fastest, and on a
shared machine that is often the luckiest measurement rather than the fastest
program (the winner's curse; see docs/decisions.md, "Confirming the leaders,
within 1.25x of the fastest"). So once a kernel's budget is spent, its ``top``
fastest candidates within ``MARGIN`` of the fastest (below) are measured
again, interleaved, until each has ``measurements`` measurements; a
candidate's latency is the median over its measurements
(``database.candidate_latency``), so one lucky or unlucky measurement is
outvoted. A leader that loses its place brings the next candidate into the
top, which is confirmed in turn when it is within the margin, for at most
``top + MAX_STEPS`` rounds. A leader whose re-measurement fails to build,
fails to run, times out or gives a wrong result no longer counts at all
(``Database.candidate_latencies``), so the next candidate takes its place;
only a round in which no leader ran at all (its worker lost) ends the
confirmation early. Re-measurements are not trials: the budget counts
distinct candidates, and a rerun of a confirmed kernel measures nothing.

The margin: the fastest is always measured again (its figure is the one the
winner's curse inflates), the other leaders only while they are within
``MARGIN`` (1.25x, about twice the median difference between two measurements
of one program on a shared machine) of the fastest.
A leader further behind is left as measured: it would need a worse than
usual measurement to hide a faster program, and measuring it only costs time.
When the fastest falls back on re-measurement, the margin moves with the new
fastest, so a leader that an unlucky fastest had left outside it is confirmed
in the next round; what the margin can miss is a program whose own single
measurement was more than 1.25x too slow. The margin halves the
re-measurements of a small run (see docs/decisions.md, "Confirming the leaders,
within 1.25x of the fastest").
"""

from __future__ import annotations

from collections.abc import Callable

from database import CandidateRecord, MeasureRecord, MeasureStatus, TrainingRow
from tuner.kernels import Kernel
from tuner.space.space import ScheduleSpace

#: Rounds of re-measurement per kernel beyond ``top`` (each round confirms at least one leader,
#: and a round that confirms a single one is common once the margin leaves the others out).
MAX_STEPS = 4
#: A leader is confirmed while its latency is at most this many times the fastest's (about
#: twice the median difference between two measurements of one program on a shared machine).
MARGIN = 1.25

RemeasureFn = Callable[[Kernel, list, list[int]], list[MeasureRecord]]


def confirm_leaders(kernel: Kernel, space: ScheduleSpace, leaders: Callable[[int], list[TrainingRow]],
                    remeasure: RemeasureFn, top: int, measurements: int, margin: float = MARGIN
                    ) -> list[MeasureRecord]:
    """Re-measure the ``top`` fastest candidates of ``kernel`` within ``margin`` of the fastest until each
    has ``measurements`` measurements.

    Parameters
    ----------
    kernel, space : Kernel, ScheduleSpace
        The kernel and its schedule space (to replay the leaders' traces).
    leaders : callable
        ``leaders(n)``: the ``n`` fastest measured candidates, fastest first, each
        with its latency and number of ``ok`` measurements (``Database.candidate_latencies``).
    remeasure : callable
        ``remeasure(kernel, candidates, times)``: measures each candidate
        ``times[i]`` more times and records it (``BatchMeasurer.remeasure``).
    top : int
        Leaders confirmed (0: none).
    measurements : int
        ``ok`` measurements each leader ends with.
    margin : float
        A leader whose latency exceeds ``margin`` times the fastest's is left as measured.

    Returns
    -------
    list of MeasureRecord
        Every re-measurement taken, in order (empty when the leaders were confirmed already).
    """
    taken: list[MeasureRecord] = []
    if top <= 0 or measurements <= 1:
        return taken
    for _ in range(top + MAX_STEPS):
        rows = leaders(top)
        short = [row for i, row in enumerate(rows) if row.measurements < measurements
                 and (i == 0 or row.median_s <= margin * rows[0].median_s)]
        if not short:
            break
        cands = [space.replay(CandidateRecord(kernel.workload.workload_hash, row.trace_json)) for row in short]
        records = remeasure(kernel, cands, [measurements - row.measurements for row in short])
        taken += records
        if all(r.status == MeasureStatus.WORKER_LOST for r in records):
            break  # no leader ran: choosing among them as measured is all that is left
    return taken

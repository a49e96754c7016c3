"""Confirming a kernel's leaders: re-measure its fastest candidates before one is chosen.

A search keeps the candidate whose measurement was the fastest, and on a
shared machine that is often the luckiest measurement rather than the fastest
program (the winner's curse): in a Qwen3-1.7B decode layer tuned at 16 trials
per kernel, the same program measured twice seconds apart differed by a median
of 14.5% and up to 1.85x, and a run that measured nothing (``--trials 0``) beat
the tuned runs end to end. So once a kernel's budget is spent, its ``top``
fastest candidates are measured again, interleaved, until each has
``measurements`` measurements; a candidate's latency is the median over its
measurements (``database.candidate_latency``), so one lucky or unlucky
measurement is outvoted. A leader that loses its place to one measured only
once brings that one into the top, which is then confirmed in turn, up to
``MAX_STEPS`` times. A leader whose re-measurement fails to build, fails to
run, times out or gives a wrong result no longer counts at all
(``Database.candidate_latencies``), so the next candidate takes its place.
Re-measurements are not trials: the budget counts distinct candidates, and a
rerun of a confirmed kernel measures nothing.

Only leaders within ``MARGIN`` of the fastest are measured again: the fastest
itself always (its figure is the one the winner's curse inflates), and the
others only while they are close enough for noise to reorder them. A leader
twice as slow as the fastest is not the faster program by luck of one
measurement, and measuring it again only costs time. In ``tune run qwen3-tiny
--stage prefill --seq-len 8 --trials 2`` (50 workloads, the untuned default
one of each kernel's two candidates), the margin halved the re-measurements,
200 to 100, and the run took 105 s instead of 139 s. When a confirmed fastest
falls back, the margin moves with the new fastest, so a close runner-up is
confirmed in the next round.
"""

from __future__ import annotations

from collections.abc import Callable

from database import CandidateRecord, MeasureRecord, TrainingRow

from .kernels import Kernel
from .space import ScheduleSpace

#: Most rounds of re-measurement per kernel (each confirms at least one leader or stops).
MAX_STEPS = 4
#: A leader is confirmed while its latency is at most this many times the fastest's (the
#: same program measured twice on a shared machine differed by a median of 14.5%).
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
    for _ in range(MAX_STEPS):
        rows = leaders(top)
        short = [row for row in rows if row.measurements < measurements and row.median_s <= margin * rows[0].median_s]
        if not short:
            break
        cands = [space.replay(CandidateRecord(kernel.workload.workload_hash, row.trace_json)) for row in short]
        records = remeasure(kernel, cands, [measurements - row.measurements for row in short])
        taken += records
        if not any(r.status == "ok" for r in records):
            break  # no leader ran (a lost worker): choosing among them as measured is all that is left
    return taken

"""Choosing the program to compile and the schedule of each of its kernels.

A kernel's schedule is its best measured one on the target; a kernel with no
successful measurement (``--trials 0``, or a new shape) gets the schedule the
trained XGBoost cost model ranks first among the untuned default and the
kernel's register-blocked or row-wise seeds, or, for a kernel without seeds,
``MODEL_PICK_SAMPLES`` sampled schedules (:func:`model_pick`), and is compiled with
it. A kernel's price is the latency of that schedule (seconds): measured, else
predicted, else (no trained model: too few measurements) its roofline lower
bound (``tuner.cost_model.roofline``) with the default schedule. A program's price is
the sum over its kernels of calls times price.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from database import CandidateRecord
from tuner.cost_model.roofline import RooflineCostModel
from tuner.space.space import ScheduleCandidate, ScheduleSpace

from .kernels import Kernel

MODEL_PICK_SAMPLES = 32
"""Sampled schedules the cost model chooses among for a kernel it has no measurement of."""


@dataclass(frozen=True)
class KernelChoice:
    """The schedule a kernel is compiled with and its price.

    Attributes
    ----------
    seconds : float
        Latency of one call in seconds: measured, predicted or the roofline bound.
    source : str
        ``"measured"``, ``"predicted"`` or ``"roofline"``.
    record : CandidateRecord or None
        The schedule to compile: the fastest measured candidate (``"measured"``),
        the model's pick (``"predicted"``), or None for the untuned default
        (``"roofline"``).
    """

    seconds: float
    source: str
    record: CandidateRecord | None = None

    @property
    def scheduled(self) -> bool:
        """Whether the kernel is compiled with a schedule other than the untuned default."""
        return self.record is not None and not self.record.is_default


def model_pick(kernel: Kernel, space: ScheduleSpace, trainer, samples: int = MODEL_PICK_SAMPLES
               ) -> tuple[ScheduleCandidate, float]:
    """The schedule of ``kernel`` the fitted cost model ranks first, and its predicted seconds.

    The pick is the candidate with the highest score (the score booster, trained
    with the ranking objective ``tune model eval`` chose, see
    ``tuner.cost_model.xgb``); its seconds come from the latency booster.

    Chooses among the untuned default and the space's seeds (:meth:`ScheduleSpace.seeds`:
    the register-blocked GEMM schedules the search measures first, usually the fastest
    measured on a GEMM); for a kernel without seeds, among the default and up to
    ``samples`` schedules sampled from ``space`` (fewer, or the default only, when the
    space is small or empty). Sampled GEMM schedules are left out where there are seeds:
    a model trained on a few trials per workload has seen few of them and misprices
    them (see docs/decisions.md, "Model pick: seeds only for a GEMM that has them").

    Raises
    ------
    ValueError
        When ``trainer``'s model is not fitted.
    """
    if not trainer.model.fitted:
        raise ValueError("the cost model is not trained: it cannot pick a schedule")
    cands = [space.default(), *(space.seeds() or space.sample(samples))]
    X = space.feature_matrix(cands, kernel.workload)
    best = int(np.argmax(np.asarray(trainer.score(X), dtype=float)))
    return cands[best], float(np.asarray(trainer.predict(X[best:best + 1]), dtype=float)[0])


def choose_kernel(db, kernel: Kernel, space: ScheduleSpace, target_hash: str, trainer,
                  roofline: RooflineCostModel | None = None) -> KernelChoice:
    """How one kernel is compiled and priced (see the module docstring).

    ``roofline`` defaults to the one measured on this machine, once per process.
    """
    best = db.best(kernel.workload.workload_hash, target_hash)
    if best is not None:
        return KernelChoice(best[1], "measured", best[0])
    if not trainer.model.fitted:
        return KernelChoice((roofline or _host_roofline()).predict_latency(kernel.workload), "roofline")
    candidate, seconds = model_pick(kernel, space, trainer)
    return KernelChoice(seconds, "predicted", candidate.record)


@functools.cache
def _host_roofline() -> RooflineCostModel:
    return RooflineCostModel.measured()


def price_programs(db, graphs, spaces, target_hash: str, trainer, known: dict[str, KernelChoice] | None = None
                   ) -> tuple[dict[str, float], dict[str, KernelChoice]]:
    """Price of each candidate program (term hash -> seconds) and each kernel's choice (workload hash -> choice).

    ``graphs`` holds (candidate, fused module, kernels) triples; a kernel shared by
    several programs is chosen once. Choices in ``known`` (from an earlier call, for
    kernels measured no further since) are reused.
    """
    prices: dict[str, float] = {}
    choices: dict[str, KernelChoice] = dict(known or {})
    for cand, _, kernels in graphs:
        total = 0.0
        for k in kernels:
            wh = k.workload.workload_hash
            if wh not in choices:
                choices[wh] = choose_kernel(db, k, spaces[wh], target_hash, trainer)
            total += k.calls * choices[wh].seconds
        prices[cand.term_hash] = total
    return prices, choices

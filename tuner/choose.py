"""Choosing the program to compile: price each candidate program from its kernels.

A kernel's price is its best measured latency on the target (seconds), else the
XGBoost cost model's prediction for it, else (no trained model: too few
measurements) its roofline lower bound (``tuner.roofline_model``); a program's
price is the sum over its kernels of calls times price.
"""

from __future__ import annotations

import functools

import numpy as np

from .cost_model import featurize
from .kernels import Kernel
from .roofline_model import RooflineCostModel


def kernel_latency(db, kernel: Kernel, space, target_hash: str, trainer,
                   roofline: RooflineCostModel | None = None) -> tuple[float, str]:
    """Price of one call of ``kernel`` in seconds, and where it came from.

    Returns ``(seconds, source)`` with source ``"measured"`` (best measured
    latency on the target), ``"predicted"`` (the trained model's cheapest
    prediction over the default and 16 sampled schedules) or ``"roofline"``
    (no trained model: ``roofline``, measured on this machine when None).
    """
    best = db.best(kernel.workload.workload_hash, target_hash)
    if best is not None:
        return best[1], "measured"
    if not trainer.model.fitted:
        return (roofline or _host_roofline()).predict_latency(kernel.workload), "roofline"
    cands = [space.default()] + space.sample(16)
    X = np.stack([featurize(f, kernel.workload) for f in space.features(cands)])
    return float(trainer.predict(X).min()), "predicted"


@functools.cache
def _host_roofline() -> RooflineCostModel:
    return RooflineCostModel.measured()


def price_programs(db, graphs, spaces, target_hash: str, trainer) -> tuple[dict[str, float], set[str]]:
    """Price of each candidate program (term hash -> seconds) and the sources used.

    ``graphs`` holds (candidate, fused module, kernels) triples; the sources are
    those of :func:`kernel_latency` over every kernel priced.
    """
    prices, sources = {}, set()
    for cand, _, kernels in graphs:
        total = 0.0
        for k in kernels:
            seconds, source = kernel_latency(db, k, spaces[k.workload.workload_hash], target_hash, trainer)
            total += k.calls * seconds
            sources.add(source)
        prices[cand.term_hash] = total
    return prices, sources

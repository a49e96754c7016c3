"""Choosing the program to compile: price each candidate program from its kernels.

A kernel's price is its best measured latency on the target (seconds), else the
cost model's prediction for it; a program's price is the sum over its kernels of
calls times price.
"""

from __future__ import annotations

import numpy as np

from .cost_model import featurize
from .kernels import Kernel


class PricingError(RuntimeError):
    """A kernel has neither a measurement nor a trained cost model to price it."""


def kernel_latency(db, kernel: Kernel, space, target_hash: str, trainer) -> tuple[float, bool]:
    """Best measured latency of ``kernel`` in seconds and False, else the model's cheapest prediction and True.

    Raises
    ------
    PricingError
        Nothing measured and no trained model.
    """
    best = db.best(kernel.workload.workload_hash, target_hash)
    if best is not None:
        return best[1], False
    if not trainer.model.fitted:
        raise PricingError(f"kernel {kernel.name} has no measurement and there is no trained cost model to price it")
    cands = [space.default()] + space.sample(16)
    X = np.stack([featurize(f, kernel.workload) for f in space.features(cands)])
    return float(trainer.predict(X).min()), True


def price_programs(db, graphs, spaces, target_hash: str, trainer) -> dict[str, float]:
    """Price of each candidate program (term hash -> seconds); ``graphs`` holds (candidate, fused, kernels)."""
    return {
        cand.term_hash: sum(k.calls * kernel_latency(db, k, spaces[k.workload.workload_hash], target_hash, trainer)[0]
                            for k in kernels)
        for cand, _, kernels in graphs
    }

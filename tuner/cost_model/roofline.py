"""The analytical fallback when there are too few measurements to train the XGBoost model.

Roofline model (Williams, Waterman and Patterson, "Roofline: an insightful visual
performance model for multicore architectures", CACM 52(4), 2009): a kernel of
``F`` FLOPs that moves ``B`` bytes takes at least

    latency_s = max(F / peak_flops_per_s, B / bandwidth_bytes_per_s)

``F`` is the workload's FLOP count (TVM's ``estimate_tir_flops``) and ``B`` its
bytes moved (every buffer argument read or written once, a lower bound on
traffic). The peaks are this machine's (``measure.roofline``: an FMA
microbenchmark and STREAM copy). It prices kernels, never schedules: every
schedule of one workload gets the same figure, so it cannot rank candidates and
the search explores at random until the XGBoost model can be trained.
"""

from __future__ import annotations

import numpy as np

from database import WorkloadRecord

MIN_TRAIN_RECORDS = 16  # fewer successful measurements: fall back to the roofline


class RooflineCostModel:
    """Latency lower bound of a workload from its FLOPs and bytes and the machine's peaks.

    Parameters
    ----------
    peak_flops_per_s : float
        Peak floating-point throughput (FLOP/s), > 0.
    bandwidth_bytes_per_s : float
        Main-memory bandwidth (bytes/s), > 0.

    Raises
    ------
    ValueError
        A peak that is not a finite positive number.
    """

    def __init__(self, peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> None:
        for name, value in (("peak FLOP/s", peak_flops_per_s), ("bandwidth", bandwidth_bytes_per_s)):
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"roofline {name} must be a finite positive number, got {value}")
        self.peak_flops_per_s = float(peak_flops_per_s)
        self.bandwidth_bytes_per_s = float(bandwidth_bytes_per_s)

    @classmethod
    def measured(cls) -> RooflineCostModel:
        """With this machine's peaks as measured by ``measure.roofline`` (about 5 s, once per process)."""
        from measure.roofline import measure_roofline

        roof = measure_roofline()
        return cls(roof.peak_flops_per_s, roof.bandwidth_bytes_per_s)

    def predict_latency(self, workload: WorkloadRecord) -> float:
        """Roofline latency of one call of ``workload`` in seconds (see the module docstring)."""
        return max(max(workload.flops, 0.0) / self.peak_flops_per_s,
                   max(workload.bytes_moved, 0.0) / self.bandwidth_bytes_per_s)

    def describe(self) -> str:
        """One line naming the model and its peaks."""
        return (f"roofline cost model: max(FLOPs / {self.peak_flops_per_s / 1e9:.1f} GFLOP/s, "
                f"bytes / {self.bandwidth_bytes_per_s / 1e9:.1f} GB/s)")

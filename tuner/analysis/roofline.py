"""Roofline analysis: tuned kernels' achieved FLOP/s and arithmetic intensity against measured peaks.

Roofline model (Williams, Waterman and Patterson, "Roofline: an insightful visual
performance model for multicore architectures", CACM 52(4), 2009): a kernel of
arithmetic intensity ``I`` (FLOPs per byte of memory traffic) can reach at most
``min(peak FLOP/s, bandwidth * I)``. The peaks come from
:func:`measure.roofline.measure_roofline` (this machine, measured); a kernel's
intensity uses the workload's ``bytes_moved`` (every buffer read or written once),
a lower bound on traffic, so its point sits at or right of its true place.
"""

from __future__ import annotations

import pandas as pd

from measure.roofline import Roofline

from .tables import AnalysisError, TuningData, candidate_latencies


def roofline_points(data: TuningData | None, roofline: Roofline) -> pd.DataFrame:
    """Each workload's fastest candidate per device key (its latency as the tuner counts it), under the roofline.

    Workloads with no floating-point work (FLOPs = 0: copies, reshapes) have no
    place on a FLOP/s roofline and are left out.

    Columns: ``workload``, ``op_kind``, ``key``, ``flops``, ``bytes_moved``, ``best_s``,
    ``intensity`` (FLOPs/byte), ``achieved_flops_per_s``, ``attainable_flops_per_s``
    (the roofline at that intensity), ``fraction`` (achieved / attainable), ``bound``
    (``"memory"`` left of the ridge, ``"compute"`` right of it).

    Raises
    ------
    AnalysisError
        When no measured workload does floating-point work.
    """
    ok = candidate_latencies(data)
    ok = ok[(ok.flops > 0) & (ok.bytes_moved > 0)]
    if ok.empty:
        raise AnalysisError("no successfully measured workload does floating-point work (FLOPs > 0)")
    best = ok.loc[ok.groupby(["workload_hash", "key"]).median_s.idxmin()]
    out = (best[["workload", "op_kind", "key", "flops", "bytes_moved", "median_s"]]
           .rename(columns={"median_s": "best_s"}))
    out["intensity"] = out.flops / out.bytes_moved
    out["achieved_flops_per_s"] = out.flops / out.best_s
    out["attainable_flops_per_s"] = roofline.attainable_flops_per_s(out.intensity.to_numpy())
    out["fraction"] = out.achieved_flops_per_s / out.attainable_flops_per_s
    out["bound"] = ["compute" if i >= roofline.ridge_intensity else "memory" for i in out.intensity]
    return out.sort_values("flops", ascending=False, kind="stable").reset_index(drop=True)


def peaks_table(roofline: Roofline) -> pd.DataFrame:
    """The measured peaks as a two-column table (``quantity``, ``value``) for display."""
    return pd.DataFrame({
        "quantity": ["peak GFLOP/s (float32 FMA)", "bandwidth GB/s (STREAM copy)", "ridge FLOPs/byte", "cores"],
        "value": [roofline.peak_flops_per_s / 1e9, roofline.bandwidth_bytes_per_s / 1e9,
                  roofline.ridge_intensity, roofline.cores],
    })

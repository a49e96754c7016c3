"""The cost model's data set from a tuning database: features, latencies and workloads.

Every measured candidate of a target (its latency the median over its successful
measurements; never a failed, timed-out or wrong-result one; see
``Database.training_rows``) is replayed: the
workload's stored TVMScript is parsed back, the candidate's trace applied, and
the cost model's features extracted (TVM's per-store features, the workload's
and the trace's), so a model can be trained or evaluated on a database alone,
without the model that produced it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import tvm

from database import CandidateRecord, MeasureStatus, TrainingRow
from measure.tvmapi import PrimFunc
from tuner.space.space import ScheduleSpace

from .xgb import N_FEATURES, valid_rows


@dataclass(frozen=True)
class Dataset:
    """Measured candidates of one target.

    Attributes
    ----------
    X : np.ndarray
        float32 [n, ``N_FEATURES``] features (``tuner.cost_model.xgb.featurize``).
    latency_s : np.ndarray
        float64 [n] median latencies in seconds, all finite and positive.
    groups : np.ndarray
        [n] workload hashes (str).
    candidate_hashes : np.ndarray
        [n] candidate hashes (str).
    kinds : np.ndarray
        [n] op kind of each row's workload (str: ``matmul``, ``attention``,
        ``reduction``, ``elementwise`` or ``other``; ``WorkloadRecord.op_kind``).
    skipped : int
        Rows left out: a latency of zero or a trace that no longer replays.
    """

    X: np.ndarray
    latency_s: np.ndarray
    groups: np.ndarray
    candidate_hashes: np.ndarray
    kinds: np.ndarray
    skipped: int = 0

    def __len__(self) -> int:
        return len(self.latency_s)

    @property
    def n_workloads(self) -> int:
        """Distinct workloads."""
        return len(set(self.groups.tolist()))


def load_repeats(db, target_hash: str) -> dict[str, tuple[float, ...]]:
    """Each measured candidate's repeat times in seconds on ``target_hash``: its ``ok`` measurements', oldest first."""
    repeats: dict[str, list[float]] = defaultdict(list)
    for record, _ in db.measure_results(target_hash):
        if record.status == MeasureStatus.OK:
            repeats[record.candidate_hash] += record.times_s
    return {c: tuple(t) for c, t in repeats.items()}


def parse_kernel(script: str) -> PrimFunc:
    """The PrimFunc of a workload's stored TVMScript (a module's ``main`` when the script is a module)."""
    parsed = tvm.script.from_source(script)
    return parsed["main"] if isinstance(parsed, tvm.IRModule) else parsed


def load_dataset(db, target_hash: str, target: tvm.target.Target) -> Dataset:
    """Replay and featurize every successful measurement of ``target_hash`` in ``db``.

    ``target`` is the TVM target the schedule space is built for (the one the
    measurements ran on).
    """
    by_workload: dict[str, list[TrainingRow]] = defaultdict(list)
    for row in db.training_rows(target_hash):
        by_workload[row.workload_hash].append(row)
    feats, lat, groups, hashes, kinds, skipped = [], [], [], [], [], 0
    for wh, rows in by_workload.items():
        workload = db.get_workload(wh)
        keep = [r for r in rows if valid_rows(np.array([r.median_s]))[0]]
        skipped += len(rows) - len(keep)
        if workload is None or not keep:
            skipped += len(keep)
            continue
        space = ScheduleSpace(parse_kernel(workload.script), wh, target)
        replayed, ok_rows = [], []
        for r in keep:
            try:
                replayed.append(space.replay(CandidateRecord(wh, r.trace_json)))
                ok_rows.append(r)
            except Exception:  # TVM raises several error types for a trace that no longer applies
                skipped += 1
        for x, r in zip(space.feature_matrix(replayed, workload), ok_rows):
            feats.append(x)
            lat.append(r.median_s)
            groups.append(wh)
            hashes.append(r.candidate_hash)
            kinds.append(workload.op_kind)
    return Dataset(
        X=np.stack(feats) if feats else np.zeros((0, N_FEATURES), np.float32),
        latency_s=np.array(lat, np.float64),
        groups=np.array(groups, dtype=object),
        candidate_hashes=np.array(hashes, dtype=object),
        kinds=np.array(kinds, dtype=object),
        skipped=skipped,
    )

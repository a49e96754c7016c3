"""A data set file (:mod:`database.dataset_file`) as the cost model's rows, with where each row came from.

Every measured candidate of every target in the file is replayed and featurized
as :func:`tuner.cost_model.dataset.load_dataset` does for one database (the file is
imported into a scratch SQLite database first); each workload on each target is
one ranking group (``workload_hash@target_hash[:16]``). Beside the rows, per row:
the models whose sessions measured its workload (or, for a collector's session,
listed it among the source's workloads), the CPU that measured it
(:func:`database.dataset_file.record_cpu`) and its repeat-halves noise in seconds
(:func:`tuner.cost_model.evaluate.repeat_noise` over its ``ok`` repeat times).
"""

from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .dataset import Dataset, load_dataset, load_repeats
from .evaluate import repeat_noise


@dataclass(frozen=True)
class Corpus:
    """The rows of a data set file and their provenance.

    Attributes
    ----------
    data : Dataset
        Features, latencies (seconds), groups (``workload@target``), candidate hashes, op kinds.
    workloads : np.ndarray
        [n] the workload hash of each row (str).
    models : np.ndarray
        [n] tuple of the model names (``qwen3-0.6b``...) each row's workload came from.
    cpu : np.ndarray
        [n] the CPU that measured each row (str).
    noise_s : np.ndarray
        [n] float64 repeat-halves noise in seconds (NaN with fewer than 2 repeat times).
    stats : dict
        :func:`database.dataset_file.dataset_stats` of the file, plus ``target_kinds``.
    """

    data: Dataset
    workloads: np.ndarray
    models: np.ndarray
    cpu: np.ndarray
    noise_s: np.ndarray
    stats: dict


def load_corpus(path: str | Path, note: Callable[[str], None] = lambda _m: None) -> Corpus:
    """Read, replay and featurize a data set file (see the module docstring).

    Raises
    ------
    database.dataset_file.DatasetFileError
        The file is unusable.
    """
    from database import open_database
    from database.dataset_file import dataset_stats, import_dataset, record_cpu
    from measure.tvmapi import make_target

    stats = dataset_stats(path)
    parts = []
    with tempfile.TemporaryDirectory() as tmp, open_database(f"sqlite:///{tmp}/corpus.db") as db:
        import_dataset(db, path)
        sessions = {s["id"]: s for s in db.sessions()}
        models_of: dict[str, set[str]] = defaultdict(set)
        for s in sessions.values():
            for wh in s["args"].get("workloads", ()):
                models_of[wh].add(str(s["args"].get("model", "?")))
        for target in db.targets():
            note(f"featurizing the records of {target.target_json} key {target.key}")
            cpu_of: dict[str, str] = {}
            for record, _ in db.measure_results(target.target_hash):
                session = sessions.get(record.session_id)
                models_of[record.workload_hash].add(str((session or {}).get("args", {}).get("model", "?")))
                cpu_of.setdefault(record.candidate_hash, record_cpu(session, target.target_json))
            part = load_dataset(db, target.target_hash, make_target(json.loads(target.target_json)))
            repeats = load_repeats(db, target.target_hash)
            parts.append((part, target, [cpu_of[c] for c in part.candidate_hashes],
                          [repeat_noise(repeats.get(c, ())) for c in part.candidate_hashes]))
    groups = [np.array([f"{g}@{t.target_hash[:16]}" for g in p.groups], dtype=object) for p, t, _, _ in parts]
    data = Dataset(
        X=np.concatenate([p.X for p, *_ in parts]) if parts else np.zeros((0, 0), np.float32),
        latency_s=_cat([p.latency_s for p, *_ in parts], np.float64),
        groups=_cat(groups, object),
        candidate_hashes=_cat([p.candidate_hashes for p, *_ in parts], object),
        kinds=_cat([p.kinds for p, *_ in parts], object),
        skipped=sum(p.skipped for p, *_ in parts),
    )
    workloads = _cat([p.groups for p, *_ in parts], object)
    models = np.empty(len(workloads), dtype=object)
    for i, w in enumerate(workloads):
        models[i] = tuple(sorted(models_of[w]))
    return Corpus(
        data=data, workloads=workloads, models=models,
        cpu=_cat([np.array(c, dtype=object) for *_, c, _ in parts], object),
        noise_s=_cat([np.array(n, np.float64) for *_, n in parts], np.float64),
        stats={**stats, "target_kinds": sorted({json.loads(t.target_json).get("kind", "?") for _, t, *_ in parts})},
    )


def _cat(arrays: list, dtype) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.zeros(0, dtype)

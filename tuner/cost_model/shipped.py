"""The pretrained cost model shipped in the package: trained from the data set file, used where a database has none.

``tune model pretrain FILE`` (:func:`pretrain`) replays and featurizes every
measured candidate of every target in a data set file (:mod:`tuner.cost_model.corpus`),
trains an :class:`~tuner.cost_model.xgb.XGBCostModel` on them all (each workload on
each target is one ranking group) and writes it to :data:`PRETRAINED_PATH` with the feature
version it was trained with, the target kinds it has seen and what it was trained on.

``tune run`` starts from it when the database holds no model of its own for the
target (:func:`tuner.cost_model.store.starting_model`), and says so. Its run then
stores the model it continued from it as the database's own, which the next run
loads instead. A shipped model of another feature version is never used: the run
says so and starts cold.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .xgb import DEFAULT_OBJECTIVE, FEATURE_VERSION, CostModelError, XGBCostModel

PRETRAINED_DIR = Path(__file__).resolve().parent / "pretrained"
#: the shipped model (package data)
PRETRAINED_PATH = PRETRAINED_DIR / "model.json.gz"
#: the data set file it is trained from (in the repository, not in the package)
DATASET_PATH = PRETRAINED_DIR / "dataset.jsonl.gz"
FORMAT = "tune-pretrained"
#: environment variable naming another pretrained model file, or ``off`` for none
PRETRAINED_ENV = "TUNE_PRETRAINED"


class PretrainedModelError(ValueError):
    """A shipped pretrained model that cannot be used: unreadable, or of another feature version."""


@dataclass(frozen=True)
class ShippedModel:
    """A pretrained model and what it was trained on.

    ``info``: ``feature_version``, ``target_kinds`` (TVM target kinds of its records,
    e.g. ``["llvm"]``), ``records`` and ``workloads`` (training rows and distinct
    workloads), ``dataset_sha256`` (the data set file's body checksum), ``cpu``
    (records per CPU), ``objective``.
    """

    model: XGBCostModel
    info: dict

    def describe(self) -> str:
        """``N records of M workloads, CPUs ...`` for a progress note."""
        cpus = ", ".join(sorted(self.info.get("cpu", {}))) or "unknown CPUs"
        return f"{self.info.get('records', '?')} records of {self.info.get('workloads', '?')} workloads, {cpus}"


def pretrained_path() -> Path | None:
    """The pretrained model a run starts from: ``TUNE_PRETRAINED`` when set (None when it says ``off``), else the
    package's :data:`PRETRAINED_PATH`."""
    value = os.environ.get(PRETRAINED_ENV, "").strip()
    if value.lower() == "off":
        return None
    return Path(value) if value else PRETRAINED_PATH


def load_shipped(path: str | Path = PRETRAINED_PATH) -> ShippedModel | None:
    """The pretrained model at ``path``, or None when there is no file.

    Raises
    ------
    PretrainedModelError
        The file is not a readable pretrained model, or was trained with another
        feature version than this code computes (the message names both).
    """
    path = Path(path)
    if not path.exists():
        return None
    try:
        data = json.loads(gzip.decompress(path.read_bytes()))
        if data.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} file")
        info = data["info"]
        if info["feature_version"] != FEATURE_VERSION:
            raise PretrainedModelError(
                f"the shipped pretrained model {path.name} has feature version {info['feature_version']!r}, this "
                f"code computes {FEATURE_VERSION!r}: it is not used (`tune model pretrain` retrains it)")
        model = XGBCostModel.load(json.dumps(data["model"]).encode())
    except PretrainedModelError:
        raise
    except (OSError, EOFError, ValueError, KeyError, TypeError, CostModelError) as exc:
        raise PretrainedModelError(f"the shipped pretrained model {path} is unreadable: {exc}") from None
    return ShippedModel(model, info)


def pretrain(dataset_file: str | Path, out: str | Path = PRETRAINED_PATH, objective: str = DEFAULT_OBJECTIVE,
             seed: int = 0, note: Callable[[str], None] = lambda _m: None) -> dict:
    """Train the pretrained model from a data set file and write it to ``out``; returns its ``info``.

    Raises
    ------
    database.dataset_file.DatasetFileError
        The file is unusable.
    ValueError
        The file holds no successful measurement that replays.
    """
    from .corpus import load_corpus

    corpus = load_corpus(dataset_file, note)
    data, stats = corpus.data, corpus.stats
    if not len(data):
        raise ValueError(f"{dataset_file} holds no successful measurement to train on")
    model = XGBCostModel(objective=objective, seed=seed).fit(data.X, data.latency_s, data.groups)
    info = {"feature_version": FEATURE_VERSION, "objective": objective, "target_kinds": stats["target_kinds"],
            "records": len(data), "workloads": data.n_workloads, "skipped": data.skipped, "cpu": stats["cpu"],
            "dataset_sha256": stats["sha256"]}
    payload = {"format": FORMAT, "info": info, "model": json.loads(model.save())}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(gzip.compress(json.dumps(payload, sort_keys=True).encode(), mtime=0))
    return info

"""The cost model's life in the database: warm start from the newest compatible version, save after a run.

A version is compatible when it was trained for the same target (target JSON and
device key, one ``target_hash``) and with this code's ``FEATURE_VERSION``; no
other is ever loaded. A stored model that cannot be read is reported on stderr
and skipped: the run trains a new one.
"""

from __future__ import annotations

import sys

from .xgb import FEATURE_VERSION, CostModelError, XGBCostModel


def load_warm_model(db, target_hash: str, warn=None) -> XGBCostModel | None:
    """The newest readable stored model for ``target_hash`` and this feature version, or None.

    ``warn`` receives a one-line message for each corrupt version skipped
    (default: printed to stderr).
    """
    warn = warn or (lambda msg: print(f"warning: {msg}", file=sys.stderr))
    for version in db.cost_model_versions(target_hash):
        if version["feature_version"] != FEATURE_VERSION:
            continue
        blob = db.cost_model_booster(version["id"])[0]
        try:
            return XGBCostModel.load(blob)
        except CostModelError as err:
            warn(f"cost model version {version['id']} skipped: {err}; a new model is trained")
    return None


def starting_model(db, target_hash: str, target_kind: str, note, shipped_path=None) -> XGBCostModel | None:
    """The model a run starts from, and a note saying which: the database's own, else the shipped one, else None.

    The database's newest compatible version (:func:`load_warm_model`) comes first.
    Without one, the shipped pretrained model (:mod:`tuner.cost_model.shipped`, at
    ``shipped_path``, default :func:`~tuner.cost_model.shipped.pretrained_path`) is used when it has seen
    ``target_kind`` (a TVM target kind such as ``llvm``); one that is unreadable or of
    another feature version is not used, and ``note`` says why.
    """
    from .shipped import PretrainedModelError, load_shipped, pretrained_path

    warm = load_warm_model(db, target_hash)
    if warm is not None:
        note("cost model: warm start from the database")
        return warm
    if other_feature_versions(db, target_hash):
        note("cost model: the stored versions have another feature version and are not used; "
             "`tune model train` trains one of this version from the database")
    try:
        path = shipped_path or pretrained_path()
        shipped = None if path is None else load_shipped(path)
    except PretrainedModelError as err:
        note(f"cost model: {err}")
        return None
    if shipped is None or target_kind not in shipped.info.get("target_kinds", ()):
        return None
    note(f"cost model: the database has no model of its own for this target; starting from the shipped pretrained "
         f"model ({shipped.describe()}); this run's model replaces it for this database")
    return shipped.model


def other_feature_versions(db, target_hash: str) -> list[str]:
    """Feature versions other than this code's that stored models for ``target_hash`` have (never loaded)."""
    return sorted({v["feature_version"] for v in db.cost_model_versions(target_hash)} - {FEATURE_VERSION})


def save_model(db, target_hash: str, trainer, metrics: dict | None = None) -> int | None:
    """Store the session's model (if it was ever fitted); returns the version id or None.

    A trainer that never retrained (a run that measured nothing) stores nothing: its
    model is the one it started from, the database's own or the shipped one.

    The metrics JSON records the objective, the training record count and the
    span (ISO times of the first and last successful measurement on the target),
    plus ``metrics`` when given (evaluation figures).
    """
    model = trainer.model
    if not model.fitted or model is trainer.base:  # the model it started from, untouched: nothing new to store
        return None
    span = db.ok_span(target_hash)
    info = {"objective": model.objective, "train_records": model.n_records_,
            "span": list(span) if span else None, **(metrics or {})}
    return db.save_cost_model(target_hash, FEATURE_VERSION, model.save(), model.n_records_, info)


def train_version(db, target_hash: str, data, objective: str, seed: int = 0, cross_validate: bool = True) -> dict:
    """Train a model on every row of ``data`` (a ``tuner.cost_model.dataset.Dataset``), store it, return what was done.

    With at least two workloads the objective is first judged on held-out
    workloads (``tuner.cost_model.evaluate``) and the figures are stored with the version.

    Returns
    -------
    dict
        ``version`` (id), ``records``, ``workloads``, ``objective`` and ``metrics``
        (held-out figures, or None with a single workload).

    Raises
    ------
    ValueError
        Fewer than ``MIN_TRAIN_RECORDS`` rows (the caller falls back to the roofline model).
    """
    from tuner.search.search import ModelTrainer

    from .evaluate import evaluate
    from .roofline import MIN_TRAIN_RECORDS

    if len(data) < MIN_TRAIN_RECORDS:
        raise ValueError(f"only {len(data)} successful measurements on this target, "
                         f"at least {MIN_TRAIN_RECORDS} are needed to train")
    metrics = None
    if cross_validate and data.n_workloads >= 2:
        metrics = evaluate(data, models=(f"xgb:{objective}",), seed=seed)[f"xgb:{objective}"]
    trainer = ModelTrainer(XGBCostModel(objective=objective, seed=seed))
    trainer.model = XGBCostModel(objective=objective, seed=seed).fit(data.X, data.latency_s, data.groups)
    version = save_model(db, target_hash, trainer, {"workloads": data.n_workloads, "heldout": metrics})
    return {"version": version, "records": len(data), "workloads": data.n_workloads,
            "objective": objective, "metrics": metrics}

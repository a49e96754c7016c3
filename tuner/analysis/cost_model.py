"""Cost-model analysis: the newest stored model against the measurements, and how the model changed.

The model judged is the newest version stored for a target with this code's
feature set (``tuner.cost_model.xgb.FEATURE_VERSION``), the one a later compile
would load. Every successful measurement of that target is replayed and
featurized (``tuner.cost_model.dataset.load_dataset``) and scored. Those scores are
in-sample (the model has seen most of these rows: its predictions lie near the
diagonal and say little). Beside them, each workload is also predicted by a model of
the same parameters trained without it (:func:`heldout_predictions`: scikit-learn's
grouped folds, as ``tune model eval`` holds workloads out), which is what a later
compile meets on a new shape; the predicted-versus-measured figure and the error
summary use those. Ranking metrics per workload are TenSet's (``tuner.cost_model.evaluate``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tuner.cost_model import trace_features
from tuner.cost_model.xgb import (
    FEATURE_VERSION,
    N_STORE_FEATURES,
    STORE_AGGREGATES,
    WORKLOAD_FEATURES,
    CostModelError,
    XGBCostModel,
)

from .tables import AnalysisError, TuningData, require_measurements


@dataclass(frozen=True)
class ModelFit:
    """A stored cost model and its predictions on the measurements of its target.

    Attributes
    ----------
    model_id : int
        The cost model version id.
    key : str
        The RPC key of its target.
    model : XGBCostModel
        The loaded model.
    predictions : pd.DataFrame
        One row per measured candidate: ``workload_hash``, ``workload``, ``candidate_hash``,
        ``measured_s``, ``predicted_s`` (seconds), ``score`` (higher is predicted faster),
        and ``heldout_predicted_s``, ``heldout_score``: the same from a model that never
        saw the row's workload (NaN when the target has measurements of one workload only).
    """

    model_id: int
    key: str
    model: XGBCostModel
    predictions: pd.DataFrame


def model_versions(data: TuningData | None) -> pd.DataFrame:
    """Stored cost model versions, oldest first, with their metrics flattened into columns.

    Columns: ``model_id``, ``created_at``, ``key``, ``feature_version``, ``record_count``,
    then one column per numeric metric (e.g. ``train_records``, held-out ``top1``).

    Raises
    ------
    AnalysisError
        When no cost model has been stored.
    """
    require_measurements(data, ok=False)
    cm = data.cost_models
    if cm.empty:
        raise AnalysisError(f"{data.url} holds no cost model version: a `tune run` with measurements stores one")
    flat = pd.json_normalize(list(cm.metrics), sep=".")
    flat = flat[[c for c in flat.columns if pd.api.types.is_numeric_dtype(flat[c]) and c != "train_records"]]
    base = cm.drop(columns=["metrics", "target_hash"]).reset_index(drop=True)
    return pd.concat([base, flat.reset_index(drop=True)], axis=1)


def newest_model_fit(data: TuningData | None, db_url: str | None = None) -> ModelFit:
    """Load the newest usable model (this feature version; the target with most measurements) and score its data.

    Raises
    ------
    AnalysisError
        When no model of this feature version is stored or readable, or its
        target has no successful measurement that still replays.
    """
    from database import open_database
    from measure.tvmapi import make_target
    from tuner.cost_model.dataset import load_dataset

    ok = require_measurements(data)
    cm = data.cost_models
    cm = cm[cm.feature_version == FEATURE_VERSION] if not cm.empty else cm
    if cm.empty:
        raise AnalysisError(f"{data.url} holds no cost model with feature version {FEATURE_VERSION}")
    counts = ok.target_hash.value_counts()
    cm = cm.assign(n=cm.target_hash.map(counts).fillna(0)).sort_values(["n", "model_id"], ascending=False)
    with open_database(db_url or data.url) as db:
        for version in cm.itertuples():
            blob = db.cost_model_booster(int(version.model_id))
            try:
                model = XGBCostModel.load(blob[0])
            except CostModelError:
                continue
            target_json = data.targets.set_index("target_hash").target_json[version.target_hash]
            ds = load_dataset(db, version.target_hash, make_target(target_json))
            if len(ds) == 0:
                continue
            names = data.workloads.set_index("workload_hash").workload
            predictions = pd.DataFrame({
                "workload_hash": ds.groups.astype(str),
                "workload": names.reindex(ds.groups).to_numpy(),
                "candidate_hash": ds.candidate_hashes.astype(str),
                "measured_s": ds.latency_s,
                "predicted_s": model.predict_latency(ds.X),
                "score": model.score(ds.X),
            })
            held = heldout_predictions(model, ds)
            predictions["heldout_predicted_s"], predictions["heldout_score"] = held
            return ModelFit(int(version.model_id), version.key, model, predictions)
    raise AnalysisError("no stored cost model could be loaded and applied to its target's measurements")


def heldout_predictions(model: XGBCostModel, ds) -> tuple[np.ndarray, np.ndarray]:
    """Each row's latency (seconds) and score from a model trained without the row's workload.

    ``ds`` is a :class:`tuner.cost_model.dataset.Dataset`; the models have ``model``'s
    parameters and are trained from nothing on the other workloads' rows, one per fold
    of :func:`tuner.cost_model.evaluate.splits` (leave-one-workload-out up to 12
    workloads, five grouped folds beyond). Both arrays are NaN where the data has
    fewer than two workloads.
    """
    from tuner.cost_model.evaluate import splits

    latency, score = np.full(len(ds), np.nan), np.full(len(ds), np.nan)
    if ds.n_workloads < 2:
        return latency, score
    for train, test in splits(ds.groups):
        held = XGBCostModel(**model.get_params()).fit(ds.X[train], ds.latency_s[train], ds.groups[train])
        latency[test], score[test] = held.predict_latency(ds.X[test]), held.score(ds.X[test])
    return latency, score


def ranking_per_workload(fit: ModelFit) -> pd.DataFrame:
    """TenSet ranking metrics of the model per workload with two or more measured candidates.

    Columns: ``workload``, ``candidates``, ``top1``, ``top5`` (best latency / latency of the
    best of the model's top k; 1 is perfect), ``pairwise`` (share of pairs ordered right),
    ``spearman`` (rank correlation of score and throughput).

    Raises
    ------
    AnalysisError
        When no workload has two measured candidates.
    """
    from tuner.cost_model.evaluate import pairwise_accuracy, spearman, topk_score

    rows = []
    for (_wh, name), g in fit.predictions.groupby(["workload_hash", "workload"], dropna=False):
        if len(g) < 2:
            continue
        lat, sc = g.measured_s.to_numpy(), g.score.to_numpy()
        rows.append((name, len(g), topk_score(lat, sc, 1), topk_score(lat, sc, 5),
                     pairwise_accuracy(lat, sc), spearman(lat, sc)))
    if not rows:
        raise AnalysisError("no workload has two successfully measured candidates to rank")
    return pd.DataFrame(rows, columns=["workload", "candidates", "top1", "top5", "pairwise", "spearman"])


def feature_names() -> list[str]:
    """Names of the cost model's features, in order: sum/mean/max of each per-store feature, the compute
    store's features, then workload features, then trace features."""
    per_store = [f"{agg}[store feature {i}]" for agg in STORE_AGGREGATES for i in range(N_STORE_FEATURES)]
    return per_store + list(WORKLOAD_FEATURES) + [f"trace: {name}" for name in trace_features.NAMES]


def feature_importance(fit: ModelFit, top: int = 20) -> pd.DataFrame:
    """The ``top`` features of the ranking booster by total gain (XGBoost's ``total_gain``).

    Columns: ``feature``, ``gain``, ``share`` (of the total gain over all features).

    Raises
    ------
    AnalysisError
        When the booster has no split (every tree a single leaf).
    """
    gains = fit.model.score_booster_.get_score(importance_type="total_gain")
    if not gains:
        raise AnalysisError(f"cost model {fit.model_id} has no split on any feature (too few measurements)")
    names = feature_names()
    rows = [(names[int(k[1:])] if k[1:].isdigit() and int(k[1:]) < len(names) else k, v) for k, v in gains.items()]
    out = pd.DataFrame(rows, columns=["feature", "gain"]).sort_values("gain", ascending=False, kind="stable")
    out["share"] = out.gain / out.gain.sum()
    return out.head(top).reset_index(drop=True)


def prediction_error(fit: ModelFit) -> dict[str, float]:
    """Predicted against measured latency: ``rows``, then the median and 90th-percentile ratio error
    of the held-out predictions (``heldout_...``, see :func:`heldout_predictions`) and of the
    stored model's in-sample ones (``in_sample_...``).

    The ratio error of a row is ``max(p/m, m/p)`` (1 is exact). The held-out figures are NaN
    when the target has measurements of one workload only.
    """
    m = fit.predictions.measured_s.to_numpy()
    out: dict[str, float] = {"rows": int(len(m))}
    for name, column in (("heldout", "heldout_predicted_s"), ("in_sample", "predicted_s")):
        p = fit.predictions[column].to_numpy()
        ratio = np.maximum(p / m, m / p)
        known = np.isfinite(ratio)
        out[f"{name}_median_ratio_error"] = float(np.median(ratio[known])) if known.any() else float("nan")
        out[f"{name}_p90_ratio_error"] = float(np.quantile(ratio[known], 0.9)) if known.any() else float("nan")
    return out

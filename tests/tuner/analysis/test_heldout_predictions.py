"""The cost-model figure's held-out predictions: each workload predicted by a model that never saw it."""

from __future__ import annotations

import numpy as np

from tuner.analysis.cost_model import heldout_predictions
from tuner.cost_model.dataset import Dataset
from tuner.cost_model.xgb import N_FEATURES, XGBCostModel


def _dataset(workloads: int, per: int = 8, seed: int = 0) -> Dataset:
    """Random features; latency a function of the features, so a model learns something."""
    rng = np.random.default_rng(seed)
    n = workloads * per
    X = rng.random((n, N_FEATURES), dtype=np.float32)
    latency = 1e-4 * np.exp(X[:, 0] + 0.5 * X[:, 1])
    groups = np.repeat([f"w{i}" for i in range(workloads)], per)
    return Dataset(X, latency, groups, np.array([f"c{i}" for i in range(n)]), np.array(["matmul"] * n))


def test_each_workload_is_predicted_by_a_model_trained_without_it():
    ds = _dataset(4)
    model = XGBCostModel(n_estimators=20).fit(ds.X, ds.latency_s, ds.groups)
    latency, score = heldout_predictions(model, ds)
    assert np.isfinite(latency).all() and np.isfinite(score).all()
    w = ds.groups == "w2"
    without = XGBCostModel(**model.get_params()).fit(ds.X[~w], ds.latency_s[~w], ds.groups[~w])
    assert np.allclose(latency[w], without.predict_latency(ds.X[w]))
    assert np.allclose(score[w], without.score(ds.X[w]))
    # the model that saw every row predicts that workload otherwise
    assert not np.allclose(latency[w], model.predict_latency(ds.X[w]))


def test_one_workload_has_no_heldout_prediction():
    ds = _dataset(1)
    model = XGBCostModel(n_estimators=5).fit(ds.X, ds.latency_s, ds.groups)
    latency, score = heldout_predictions(model, ds)
    assert np.isnan(latency).all() and np.isnan(score).all()

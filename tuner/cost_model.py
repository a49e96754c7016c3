"""The XGBoost cost model: predicts a candidate's latency from its program features.

Features (version ``FEATURE_VERSION``) are TVM's per-store features of the
scheduled PrimFunc (MetaSchedule's ``PerStoreFeature``, 164 values per store,
the family TenSet uses), aggregated over stores by sum, mean and max, followed
by workload features: log2 of FLOPs, of bytes moved, of arithmetic intensity
(FLOPs per byte) and of the store count. The label is ``-log(median latency in
seconds)``: higher is faster; within a workload it ranks candidates, across
workloads it prices kernels the run has not measured.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import xgboost as xgb

from database import WorkloadRecord

FEATURE_VERSION = "per-store-164/sum-mean-max/workload-4/v1"
N_STORE_FEATURES = 164


def featurize(per_store: np.ndarray, workload: WorkloadRecord) -> np.ndarray:
    """One feature vector from a candidate's per-store features [n_stores, 164] and its workload.

    Returns a float32 vector of length ``3 * 164 + 4``.
    """
    if per_store.size == 0:
        per_store = np.zeros((1, N_STORE_FEATURES), np.float32)
    flops = max(workload.flops, 1.0)
    nbytes = max(workload.bytes_moved, 1.0)
    extra = np.log2([flops, nbytes, flops / nbytes, float(per_store.shape[0])])
    return np.concatenate(
        [per_store.sum(axis=0), per_store.mean(axis=0), per_store.max(axis=0), extra]
    ).astype(np.float32)


class XGBCostModel:
    """Gradient-boosted trees over program features (scikit-learn estimator conventions).

    Parameters
    ----------
    n_estimators, max_depth, learning_rate : XGBoost parameters.
    seed : int
        Random seed of the booster.
    """

    def __init__(self, n_estimators: int = 200, max_depth: int = 6, learning_rate: float = 0.1, seed: int = 0):
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.seed = seed

    def fit(self, X: np.ndarray, latency_s: np.ndarray) -> XGBCostModel:
        """Fit on features ``X`` [n, d] and measured median latencies in seconds [n]."""
        self.booster_ = xgb.train(
            {
                "objective": "reg:squarederror",
                "max_depth": self.max_depth,
                "eta": self.learning_rate,
                "seed": self.seed,
                "nthread": 1,
                "verbosity": 0,
            },
            xgb.DMatrix(X, label=-np.log(latency_s)),
            num_boost_round=self.n_estimators,
        )
        self.n_records_ = int(len(latency_s))
        return self

    @property
    def fitted(self) -> bool:
        """True once ``fit`` or ``load`` has run."""
        return hasattr(self, "booster_")

    def predict_latency(self, X: np.ndarray) -> np.ndarray:
        """Predicted latency in seconds for each row of ``X``."""
        return np.exp(-self.booster_.predict(xgb.DMatrix(X)))

    def save(self) -> bytes:
        """The booster in XGBoost's JSON format, with this model's parameters."""
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "model.json"
            self.booster_.save_model(path)
            return json.dumps({"params": self.get_params(), "booster": path.read_text()}).encode()

    @classmethod
    def load(cls, blob: bytes) -> XGBCostModel:
        """A model saved by ``save``."""
        data = json.loads(blob.decode())
        model = cls(**data["params"])
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "model.json"
            path.write_text(data["booster"])
            model.booster_ = xgb.Booster(model_file=str(path))
        return model

    def get_params(self) -> dict:
        """The constructor parameters."""
        return {
            "n_estimators": self.n_estimators,
            "max_depth": self.max_depth,
            "learning_rate": self.learning_rate,
            "seed": self.seed,
        }

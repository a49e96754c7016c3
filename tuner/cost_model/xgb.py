"""The XGBoost cost model: ranks a workload's schedule candidates and prices kernels.

Features (version ``FEATURE_VERSION``) are TVM's per-store features of the
scheduled PrimFunc (MetaSchedule's ``PerStoreFeature``, 164 values per store,
the family TenSet uses), aggregated over stores by sum, mean and max, then the
features of the *compute store* alone (the store with the most arithmetic, see
:func:`compute_store`), followed by workload features (:func:`workload_features`:
log2 of FLOPs, of bytes moved, of arithmetic intensity (FLOPs per byte), of the
store count, and the buffers' shapes) and the features of the candidate's trace
(``tuner.cost_model.trace_features``: tile sizes, unroll step, instruction counts). NaN or
infinite feature values become 0.

The compute store's own row keeps its loop structure, vectorization and buffer
strides together, where the aggregates mix them with an initialisation store,
an epilogue or a split-k partial sum. The shape and trace features gain a
little top-1 and no pairwise accuracy beyond noise: the shapes are kept for what
a workload is, the trace's because they never lowered the held-out mean (see
docs/decisions.md, "Cost model features: the compute store's own row" and
"Cost model features: the workload's shapes and the trace's decisions").

Two boosters are trained on the same rows:

- the *score* booster ranks candidates within a workload (higher is faster).
  Its objective is one of ``OBJECTIVES``, ``rank:pairwise`` by default: a
  regression on ``-log(latency)`` spends its trees on telling workloads apart,
  whose latencies span orders of magnitude once prefill and decode share a
  database, where a ranking objective compares candidates of one workload only
  (see docs/decisions.md, "Cost model objective: rank:pairwise"). Both boosters
  are small, 100 trees over 32 histogram bins on one thread (see
  docs/decisions.md, "Cost model booster size: 100 trees over 32 histogram bins");
- the *latency* booster regresses ``-log(median latency in seconds)`` and prices
  kernels the run has not measured (a sum over kernels needs seconds, which a
  ranking score does not give).

Only successful measurements with a finite positive latency train the model:
failed, timed-out and wrong-result rows never reach it (``Database.training_rows``
leaves them out) and a zero or non-finite time is dropped, so it never becomes
an infinite throughput.
"""

from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path

import numpy as np
import xgboost as xgb

from database import WorkloadRecord

from .trace_features import N_TRACE_FEATURES, trace_features

FEATURE_VERSION = "per-store-164/sum-mean-max-compute/workload-9/trace-23/v3"
N_STORE_FEATURES = 164
#: how the per-store rows are reduced, in feature order: over all stores, then the compute store's row
STORE_AGGREGATES = ("sum", "mean", "max", "compute")
#: the workload features that follow them, in order (then the trace's, ``tuner.cost_model.trace_features.NAMES``)
WORKLOAD_FEATURES = ("log2 FLOPs", "log2 bytes", "log2 FLOPs/byte", "log2 stores",
                     *(f"log2 1+output extent {i}" for i in range(3)),
                     *(f"log2 1+input elements {i}" for i in range(2)))
N_FEATURES = len(STORE_AGGREGATES) * N_STORE_FEATURES + len(WORKLOAD_FEATURES) + N_TRACE_FEATURES
_OP_COUNTS = slice(0, 16)  # per-store features 0..15: float, int, bool and select operation counts
_OUTER_PROD = 161  # per-store feature: product of the store's outer loop extents
OBJECTIVES = ("rank:pairwise", "rank:ndcg", "reg:normalized", "reg:latency")
DEFAULT_OBJECTIVE = "rank:pairwise"
NDCG_LEVELS = 31  # rank:ndcg's exponential gain needs integer relevance below 32


class CostModelError(ValueError):
    """A stored cost model that cannot be read (corrupt, or from another feature version)."""


def featurize(per_store: np.ndarray, workload: WorkloadRecord, trace_json: str) -> np.ndarray:
    """One feature vector of a candidate: its per-store features [n_stores, 164], workload and trace.

    Returns a finite float32 vector of length ``N_FEATURES`` (``4 * 164 + 9 + 23``):
    the sum, mean and max over stores, the compute store's row, the workload
    features (``WORKLOAD_FEATURES``: :func:`workload_features`) and the trace's
    (``tuner.trace_features.trace_features``).

    Raises
    ------
    ValueError
        ``trace_json`` is not a trace's JSON.
    """
    per_store = np.asarray(per_store, np.float64)
    if per_store.size == 0:
        per_store = np.zeros((1, N_STORE_FEATURES))
    per_store = np.where(np.isfinite(per_store), per_store, 0.0)
    vec = np.concatenate([per_store.sum(axis=0), per_store.mean(axis=0), per_store.max(axis=0),
                          compute_store(per_store), workload_features(workload, per_store.shape[0]),
                          trace_features(trace_json)])
    return clean_features(vec).astype(np.float32)


def workload_features(workload: WorkloadRecord, n_stores: int) -> np.ndarray:
    """float64 [9] features of a workload (``WORKLOAD_FEATURES``).

    log2 of FLOPs, bytes moved, FLOPs per byte and ``n_stores``; log2(1 + extent)
    of the 3 largest dimensions of the last buffer (the output, for a kernel with
    one) and log2(1 + elements) of the 2 largest other buffers, from
    ``workload.shapes_json`` (0 where there are fewer, or no shapes).
    """
    flops = max(float(workload.flops), 1.0)
    nbytes = max(float(workload.bytes_moved), 1.0)
    return np.concatenate([np.log2([flops, nbytes, flops / nbytes, max(float(n_stores), 1.0)]),
                           _shape_features(workload.shapes_json or "[]")])


@functools.lru_cache(maxsize=1024)
def _shape_features(shapes_json: str) -> np.ndarray:
    """The 5 shape features of :func:`workload_features`, parsed once per workload (every candidate asks)."""
    try:
        shapes = [[int(d) for d in b["shape"]] for b in json.loads(shapes_json)]
    except (TypeError, ValueError, KeyError):
        shapes = []
    out = sorted(shapes[-1], reverse=True)[:3] if shapes else []
    inputs = sorted((float(np.prod(s)) for s in shapes[:-1]), reverse=True)[:2]
    padded = out + [0] * (3 - len(out)) + inputs + [0] * (2 - len(inputs))
    features = np.log2(1.0 + np.array(padded, np.float64))
    features.setflags(write=False)  # shared by every caller of the cache
    return features


def compute_store(per_store: np.ndarray) -> np.ndarray:
    """The per-store feature row [164] of the store with the most arithmetic in ``per_store`` [n_stores, 164].

    TVM's operation counts (features 0..15) are log-scaled, so the store with the
    largest sum of them is taken; ties go to the larger outer loop product
    (feature 161). For a GEMM this is the multiply-accumulate update, not its
    zero initialisation or epilogue. ``per_store`` must be finite and non-empty.
    """
    weight = per_store[:, _OP_COUNTS].sum(axis=1) + 1e-3 * per_store[:, _OUTER_PROD]
    return per_store[int(np.argmax(weight))]


def clean_features(X: np.ndarray) -> np.ndarray:
    """``X`` with NaN and infinite values replaced by 0 and magnitudes clipped to float32 range."""
    X = np.asarray(X, np.float64)
    return np.clip(np.where(np.isfinite(X), X, 0.0), -3e38, 3e38)


def valid_rows(latency_s: np.ndarray) -> np.ndarray:
    """Mask of latencies (seconds) usable for training: finite and above zero."""
    latency_s = np.asarray(latency_s, np.float64)
    return np.isfinite(latency_s) & (latency_s > 0)


def labels(objective: str, latency_s: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Training labels of the score booster (higher is faster) for latencies in seconds.

    ``reg:latency`` and ``rank:pairwise``: ``-log(latency)`` (pairwise only compares
    within a group). ``reg:normalized``: per-group normalised throughput, best
    latency of the group divided by the latency, in (0, 1]. ``rank:ndcg``: that
    throughput quantised to integers 0..30.
    """
    if objective in ("reg:latency", "rank:pairwise"):
        return -np.log(latency_s)
    best = {g: latency_s[groups == g].min() for g in np.unique(groups)}
    norm = np.array([best[g] for g in groups]) / latency_s
    if objective == "reg:normalized":
        return norm
    if objective == "rank:ndcg":
        return np.round(norm * (NDCG_LEVELS - 1))
    raise ValueError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")


def _xgb_objective(objective: str) -> str:
    return {"reg:normalized": "reg:squarederror", "reg:latency": "reg:squarederror"}.get(objective, objective)


class XGBCostModel:
    """Gradient-boosted trees over program features (scikit-learn estimator conventions).

    Parameters
    ----------
    objective : str
        One of ``OBJECTIVES``: how the score booster learns to rank.
    n_estimators, max_depth, learning_rate : XGBoost parameters.
    max_bin : int
        Histogram bins per feature (XGBoost's ``hist`` method).
    seed : int
        Random seed of the boosters.
    """

    def __init__(self, objective: str = DEFAULT_OBJECTIVE, n_estimators: int = 100, max_depth: int = 6,
                 learning_rate: float = 0.1, max_bin: int = 32, seed: int = 0):
        if objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
        self.objective = objective
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.max_bin = max_bin
        self.seed = seed

    def _params(self, objective: str) -> dict:
        return {"objective": objective, "max_depth": self.max_depth, "eta": self.learning_rate,
                "tree_method": "hist", "max_bin": self.max_bin, "seed": self.seed, "nthread": 1, "verbosity": 0}

    def fit(self, X: np.ndarray, latency_s: np.ndarray, groups: np.ndarray | None = None,
            base: XGBCostModel | None = None, rounds: int | None = None) -> XGBCostModel:
        """Fit on features ``X`` [n, d], median latencies in seconds [n] and workload ids [n].

        Rows with a zero, negative or non-finite latency are dropped. ``base``, a
        fitted model with the same objective, is continued with ``rounds`` more
        trees (default ``n_estimators``) instead of starting from nothing: this is
        how a warm-started run keeps what earlier compiles learned.

        Raises
        ------
        ValueError
            No usable row.
        """
        latency_s = np.asarray(latency_s, np.float64)
        groups = np.zeros(len(latency_s), np.int64) if groups is None else np.asarray(groups)
        keep = valid_rows(latency_s)
        if not keep.any():
            raise ValueError("no measurement with a finite positive latency to train on")
        X, latency_s, groups = clean_features(X)[keep], latency_s[keep], groups[keep]
        _, qid = np.unique(groups, return_inverse=True)
        order = np.argsort(qid, kind="stable")  # XGBoost's ranking wants rows grouped by query
        X, latency_s, groups, qid = X[order], latency_s[order], groups[order], qid[order]
        rounds = self.n_estimators if rounds is None else rounds
        if base is not None and base.objective != self.objective:
            base = None
        score = xgb.DMatrix(X, label=labels(self.objective, latency_s, groups), qid=qid)
        self.score_booster_ = xgb.train(self._params(_xgb_objective(self.objective)), score, rounds,
                                        xgb_model=base.score_booster_ if base else None)
        if self.objective == "reg:latency":
            self.latency_booster_ = self.score_booster_
        else:
            lat = xgb.DMatrix(X, label=-np.log(latency_s))
            self.latency_booster_ = xgb.train(self._params("reg:squarederror"), lat, rounds,
                                              xgb_model=base.latency_booster_ if base else None)
        self.n_records_ = int(len(latency_s)) + (base.n_records_ if base else 0)
        return self

    @property
    def fitted(self) -> bool:
        """True once ``fit`` or ``load`` has run."""
        return hasattr(self, "score_booster_")

    def score(self, X: np.ndarray) -> np.ndarray:
        """Ranking score of each row of ``X`` [n, d]: higher is faster, comparable within a workload."""
        return self.score_booster_.predict(xgb.DMatrix(clean_features(X)))

    def predict_latency(self, X: np.ndarray) -> np.ndarray:
        """Predicted latency in seconds for each row of ``X`` [n, d]."""
        return np.exp(-self.latency_booster_.predict(xgb.DMatrix(clean_features(X))))

    def save(self) -> bytes:
        """Both boosters in XGBoost's JSON format, with this model's parameters, as UTF-8 JSON."""
        boosters = {"score": _booster_json(self.score_booster_), "latency": _booster_json(self.latency_booster_)}
        data = {"params": self.get_params(), "feature_version": FEATURE_VERSION,
                "n_records": self.n_records_, "boosters": boosters}
        return json.dumps(data).encode()

    @classmethod
    def load(cls, blob: bytes) -> XGBCostModel:
        """A model saved by ``save``.

        Raises
        ------
        CostModelError
            The bytes are not a readable model of this feature version.
        """
        try:
            data = json.loads(bytes(blob).decode())
            if data.get("feature_version", FEATURE_VERSION) != FEATURE_VERSION:
                raise CostModelError(f"stored model has feature version {data['feature_version']!r}, "
                                     f"this code computes {FEATURE_VERSION!r}")
            if "boosters" not in data:  # the first format: one -log(latency) regression booster
                data = {"params": dict(data["params"], objective="reg:latency"), "n_records": 0,
                        "boosters": {"score": data["booster"], "latency": data["booster"]}}
            model = cls(**data["params"])
            model.score_booster_ = _booster_from_json(data["boosters"]["score"])
            model.latency_booster_ = _booster_from_json(data["boosters"]["latency"])
            model.n_records_ = int(data.get("n_records", 0))
        except CostModelError:
            raise
        except Exception as err:  # json, unicode, key and XGBoost errors all mean a corrupt model
            raise CostModelError(f"stored cost model is corrupt: {str(err).strip().splitlines()[0][:200]}") from None
        return model

    def get_params(self) -> dict:
        """The constructor parameters."""
        return {"objective": self.objective, "n_estimators": self.n_estimators, "max_depth": self.max_depth,
                "learning_rate": self.learning_rate, "max_bin": self.max_bin, "seed": self.seed}


def _booster_json(booster: xgb.Booster) -> str:
    return bytes(booster.save_raw(raw_format="json")).decode()


def _booster_from_json(text: str) -> xgb.Booster:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.json"
        path.write_text(text)
        return xgb.Booster(model_file=str(path))

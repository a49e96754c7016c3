"""Judging cost models on unseen workloads: grouped cross-validation and ranking metrics.

Whole workloads are held out (scikit-learn's ``LeaveOneGroupOut`` up to
``MAX_LOGO_GROUPS`` workloads, ``GroupKFold`` beyond), each model is trained on
the rest and scores the held-out workload's measured candidates. Or, as a later
compile uses the model (:func:`evaluate_transfer`), each model is trained on one
database (say, Qwen3-0.6B's runs) and judged on the workloads of another that
the first never measured (Qwen3-1.7B's new shapes). Per held-out
workload with at least two candidates (TenSet's metrics, Zheng et al., NeurIPS
2021 Datasets and Benchmarks, section 5):

- top-k score: latency of the best measured candidate divided by the least
  latency among the model's k highest-scored candidates (1.0 is perfect);
- pairwise accuracy: share of candidate pairs with different latencies that the
  model orders correctly;
- Spearman's rank correlation between score and throughput (scipy).

Each figure is the mean over held-out workloads, with its 95% interval
(``interval``: a percentile bootstrap over the workloads, ``scipy.stats.bootstrap``,
Efron and Tibshirani, *An Introduction to the Bootstrap*, 1993, ch. 13): how far
the mean could move were other workloads of the same kind drawn. Workloads with
fewer than ``min_candidates`` measured candidates can be left out: a workload of
two candidates adds a pairwise score of exactly 0 or 1. Each figure is given again per op kind
(``by_kind``): the mean over all workloads weighs every workload alike, and a
layer has many elementwise kernels with two candidates each, which are easy to
order, beside the few GEMMs, reductions and attention kernels that hold its
time. Models: XGBoost with each objective of ``tuner.cost_model.xgb.OBJECTIVES``,
scikit-learn's random forest and ridge regression on per-workload normalised
throughput, and a random ranking.

Beside the models, :func:`repeat_agreement` gives the same figures for the
measurements themselves: how well the first half of each candidate's repeat
times orders the candidates by the second half. A model judged against such
noisy labels is not expected to do better than a second measurement would.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
from scipy.stats import bootstrap, spearmanr
from sklearn.ensemble import RandomForestRegressor
from sklearn.linear_model import Ridge
from sklearn.model_selection import GroupKFold, LeaveOneGroupOut
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from .dataset import Dataset
from .xgb import OBJECTIVES, XGBCostModel, clean_features, labels

MAX_LOGO_GROUPS = 12
#: bootstrap resamples behind each interval, and its confidence level
BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95
MODELS = tuple(f"xgb:{o}" for o in OBJECTIVES) + ("random-forest", "linear", "random")

Scorer = Callable[[np.ndarray], np.ndarray]


def topk_score(latency_s: np.ndarray, score: np.ndarray, k: int) -> float:
    """Best latency / least latency among the ``k`` highest scores (one workload; seconds in, ratio out)."""
    picks = np.argsort(-np.asarray(score), kind="stable")[:k]
    return float(np.min(latency_s) / np.min(np.asarray(latency_s)[picks]))


def pairwise_accuracy(latency_s: np.ndarray, score: np.ndarray) -> float | None:
    """Share of pairs with different latencies where the faster one has the higher score (ties in score: half).

    None when every latency is equal.
    """
    lat, sc = np.asarray(latency_s), np.asarray(score)
    i, j = np.triu_indices(len(lat), k=1)
    differ = lat[i] != lat[j]
    if not differ.any():
        return None
    i, j = i[differ], j[differ]
    faster_i = lat[i] < lat[j]
    agree = np.where(faster_i, sc[i] > sc[j], sc[j] > sc[i]).astype(float)
    agree[sc[i] == sc[j]] = 0.5
    return float(agree.mean())


def distinct_pairwise_accuracy(latency_s: np.ndarray, score: np.ndarray, noise_s: np.ndarray) -> float | None:
    """:func:`pairwise_accuracy` over the pairs the measurements themselves tell apart.

    A pair counts when its latencies differ by more than the sum of the two
    candidates' repeat-halves noise ``noise_s`` (seconds, :func:`repeat_noise`): the
    gap between the medians of the first and second half of each one's repeat
    times. A pair with an unknown noise (NaN) does not count. None when no pair counts.
    """
    lat, sc, noise = np.asarray(latency_s), np.asarray(score), np.asarray(noise_s, np.float64)
    i, j = np.triu_indices(len(lat), k=1)
    keep = np.abs(lat[i] - lat[j]) > noise[i] + noise[j]  # False where a noise is NaN
    if not keep.any():
        return None
    i, j = i[keep], j[keep]
    agree = np.where(lat[i] < lat[j], sc[i] > sc[j], sc[j] > sc[i]).astype(float)
    agree[sc[i] == sc[j]] = 0.5
    return float(agree.mean())


def repeat_noise(times_s) -> float:
    """A candidate's repeat-halves noise in seconds: |median of the first ``ceil(n / 2)`` repeat times - median of
    the rest|, as :func:`repeat_agreement` splits them; NaN with fewer than 2 times."""
    times = np.asarray(times_s, np.float64)
    if len(times) < 2:
        return float("nan")
    half = (len(times) + 1) // 2
    return float(abs(np.median(times[:half]) - np.median(times[half:])))


def spearman(latency_s: np.ndarray, score: np.ndarray) -> float | None:
    """Spearman's rho between score and throughput (1 / latency); None when either is constant."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rho = spearmanr(score, -np.asarray(latency_s)).statistic
    return None if not np.isfinite(rho) else float(rho)


def ranking_metrics(latency_s: np.ndarray, score: np.ndarray, groups: np.ndarray, min_candidates: int = 2,
                    noise_s: np.ndarray | None = None) -> dict:
    """Mean top-1, top-5, pairwise accuracy and Spearman over groups with ``min_candidates`` or more candidates.

    Returns ``{top1, top5, pairwise, spearman, workloads, interval}``: each mean
    (None with no group to judge), the groups judged, and ``interval`` mapping each
    metric to the ``[low, high]`` bounds of its mean (see :func:`mean_interval`).
    With ``noise_s`` (each candidate's repeat-halves noise in seconds, :func:`repeat_noise`),
    ``pairwise_distinct`` too: :func:`distinct_pairwise_accuracy`, beside the plain pairwise.

    Raises
    ------
    ValueError
        ``min_candidates`` is below 2 (one candidate has nothing to rank).
    """
    if min_candidates < 2:
        raise ValueError(f"a workload needs at least 2 candidates to rank, min_candidates is {min_candidates}")
    per: dict[str, list[float]] = {"top1": [], "top5": [], "pairwise": [], "spearman": []}
    if noise_s is not None:
        per["pairwise_distinct"] = []
    for g in np.unique(groups):
        m = groups == g
        if m.sum() < min_candidates:
            continue
        lat, sc = latency_s[m], score[m]
        per["top1"].append(topk_score(lat, sc, 1))
        per["top5"].append(topk_score(lat, sc, 5))
        values = [("pairwise", pairwise_accuracy(lat, sc)), ("spearman", spearman(lat, sc))]
        if noise_s is not None:
            values.append(("pairwise_distinct", distinct_pairwise_accuracy(lat, sc, noise_s[m])))
        for name, value in values:
            if value is not None:
                per[name].append(value)
    out: dict = {name: (float(np.mean(v)) if v else None) for name, v in per.items()}
    out["workloads"] = len(per["top1"])
    out["interval"] = {name: mean_interval(v) for name, v in per.items()}
    return out


def mean_interval(values: list[float], seed: int = 0) -> list[float] | None:
    """The ``CONFIDENCE`` interval ``[low, high]`` of the mean of per-workload ``values``.

    A percentile bootstrap (``scipy.stats.bootstrap``, ``BOOTSTRAP_RESAMPLES``
    resamples of the workloads, seeded by ``seed``), widened to hold the mean
    itself where floating-point rounding puts a bound a step past it; None for
    fewer than 2 values.
    """
    if len(values) < 2:
        return None
    v = np.asarray(values, np.float64)
    mean = float(np.mean(v))  # the mean of equal values, or a resampled mean, can round a step off them
    if np.all(v == v[0]):
        return [mean, mean]
    res = bootstrap((v,), np.mean, confidence_level=CONFIDENCE, n_resamples=BOOTSTRAP_RESAMPLES,
                    method="percentile", rng=np.random.default_rng(seed))
    return [min(float(res.confidence_interval.low), mean), max(float(res.confidence_interval.high), mean)]


def fit_scorer(name: str, X: np.ndarray, latency_s: np.ndarray, groups: np.ndarray, seed: int = 0,
               xgb_params: dict | None = None) -> Scorer:
    """Train model ``name`` (one of ``MODELS``) and return its scoring function (higher is faster).

    ``xgb_params`` (``n_estimators``, ``max_bin``...) override ``XGBCostModel``'s defaults.
    """
    if name.startswith("xgb:"):
        model = XGBCostModel(objective=name[4:], seed=seed, **(xgb_params or {})).fit(X, latency_s, groups)
        return model.score
    if name == "random":
        rng = np.random.default_rng(seed)
        return lambda Xq: rng.random(len(Xq))
    y = labels("reg:normalized", latency_s, groups)
    if name == "random-forest":
        est = RandomForestRegressor(n_estimators=100, min_samples_leaf=2, random_state=seed, n_jobs=1)
    elif name == "linear":
        est = make_pipeline(StandardScaler(), Ridge(alpha=1.0))
    else:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
    est.fit(clean_features(X), y)
    return lambda Xq: est.predict(clean_features(Xq))


def splits(groups: np.ndarray):
    """Train/test index pairs that hold out whole workloads."""
    n = len(np.unique(groups))
    if n < 2:
        raise ValueError(f"grouped evaluation needs measurements of at least 2 workloads, got {n}")
    cv = LeaveOneGroupOut() if n <= MAX_LOGO_GROUPS else GroupKFold(n_splits=5)
    return list(cv.split(np.zeros(len(groups)), groups=groups))


def evaluate(data: Dataset, models: tuple[str, ...] = MODELS, seed: int = 0,
             xgb_params: dict | None = None, min_candidates: int = 2) -> dict[str, dict]:
    """Held-out-workload metrics of each model on ``data``.

    Returns ``{model: {top1, top5, pairwise, spearman, workloads, interval, by_kind}}``
    (see :func:`ranking_metrics`), ``by_kind`` mapping each op kind to the same
    figures over its workloads only. Every workload is trained on; only those with
    ``min_candidates`` or more are judged.

    ``xgb_params`` override the XGBoost models' defaults (see :func:`fit_scorer`).

    Raises
    ------
    ValueError
        Fewer than two workloads.
    """
    folds = splits(data.groups)
    results = {}
    for name in models:
        score = np.zeros(len(data))
        for train, test in folds:
            scorer = fit_scorer(name, data.X[train], data.latency_s[train], data.groups[train], seed, xgb_params)
            score[test] = scorer(data.X[test])
        results[name] = metrics(data.latency_s, score, data.groups, data.kinds, min_candidates)
    return results


def evaluate_transfer(train: Dataset, test: Dataset, models: tuple[str, ...] = MODELS, seed: int = 0,
                      xgb_params: dict | None = None, min_candidates: int = 2) -> dict[str, dict]:
    """Metrics of each model trained on all of ``train`` and judged on the workloads of ``test`` that
    ``train`` never measured (a later compile's new shapes, ranked by what an earlier one learned).

    Returns the same figures as :func:`evaluate`; workloads of ``test`` that ``train``
    also holds are left out (see :func:`unseen_workloads`).

    Raises
    ------
    ValueError
        ``train`` is empty, or ``test`` has no workload that ``train`` lacks.
    """
    if not len(train):
        raise ValueError("the training database has no successful measurement of this target")
    keep = unseen_workloads(train, test)
    if not keep.any():
        raise ValueError("every workload of the evaluated database is also in the training database: "
                         "nothing unseen to judge")
    results = {}
    for name in models:
        score = fit_scorer(name, train.X, train.latency_s, train.groups, seed, xgb_params)(test.X[keep])
        results[name] = metrics(test.latency_s[keep], score, test.groups[keep], test.kinds[keep], min_candidates)
    return results


def repeat_agreement(repeats: dict[str, tuple[float, ...]], data: Dataset,
                     rows: np.ndarray | None = None, min_candidates: int = 2) -> dict:
    """The figures of :func:`evaluate` for the measurements themselves: their first half against their second.

    ``repeats`` maps a candidate hash to its repeat times in seconds, in the order
    they were measured (every ``ok`` measurement on the target, oldest first; see
    :func:`tuner.cost_model.dataset.load_repeats`). For each row of ``data`` (or of the
    boolean mask ``rows`` [len(data)]) whose candidate has at least two repeat times,
    the median of the first ``ceil(n / 2)`` scores it (its negative: higher is
    faster) and the median of the rest is its latency; rows with fewer are left
    out. The halves of a candidate measured again in a later session fall mostly
    in different sessions, so they carry that session-to-session noise too; the
    halves of one measurement only the noise within it.

    Returns ``{top1, top5, pairwise, spearman, workloads, interval, by_kind}`` as one
    model of :func:`evaluate` does, over workloads with ``min_candidates`` or more such rows.
    """
    rows = np.ones(len(data), bool) if rows is None else np.asarray(rows, bool)
    idx = [i for i in np.flatnonzero(rows) if len(repeats.get(data.candidate_hashes[i], ())) >= 2]
    first, second = [], []
    for i in idx:
        times = np.asarray(repeats[data.candidate_hashes[i]], np.float64)
        half = (len(times) + 1) // 2
        first.append(np.median(times[:half]))
        second.append(np.median(times[half:]))
    idx = np.array(idx, np.int64)
    return metrics(np.array(second), -np.array(first), data.groups[idx], data.kinds[idx], min_candidates)


def unseen_workloads(train: Dataset, test: Dataset) -> np.ndarray:
    """Boolean mask [len(test)] of the rows of ``test`` whose workload ``train`` has no measurement of."""
    return ~np.isin(test.groups, np.unique(train.groups))


def metrics(latency_s: np.ndarray, score: np.ndarray, groups: np.ndarray, kinds: np.ndarray,
            min_candidates: int, noise_s: np.ndarray | None = None) -> dict:
    """:func:`ranking_metrics` over all groups, and again per op kind (``by_kind``)."""
    out = ranking_metrics(latency_s, score, groups, min_candidates, noise_s)
    out["by_kind"] = {kind: ranking_metrics(latency_s[kinds == kind], score[kinds == kind], groups[kinds == kind],
                                            min_candidates, None if noise_s is None else noise_s[kinds == kind])
                      for kind in sorted(set(kinds.tolist()))}
    return out

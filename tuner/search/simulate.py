"""Replaying a database's measurements to compare search strategies without hardware.

For every workload of a target, the pool is the set of candidates that were
measured (a strategy may only pick those): a candidate's outcome is its latency
as the database counts it (the median over its ``ok`` measurements, see
``database.candidate_latency``); a candidate with no ``ok`` measurement, or any
``wrong_result``, costs a trial and is never a best time. A strategy orders the pool batch by batch with
the real search policy (``tuner.search.search.pick_batch``: the model's top picks plus
a random exploration share; the untuned default and the leading register-blocked
seeds first, as in ``tune_kernel``),
retraining after each batch on what it has "measured" so far.

Strategies:

- ``random``: a random order (exploration share 1);
- ``cold``: the cost model learns from this workload's replayed results only;
- ``warm``: the model starts from one trained on the *other* workloads (held out
  by ``GroupKFold``), as a later compile starts from a stored model; or from
  one trained on another database, replaying only the workloads it never measured;
- ``shipped``: the model starts from the package's pretrained model
  (:mod:`tuner.cost_model.shipped`), as a first compile on an empty database does;
  the caller replays only workloads that model was not trained on.

The curve is, per trial count t, the mean over workloads of
``best latency in the pool / best latency among the first t picks`` (0 before a
successful pick; 1.0 means the pool's best was found), averaged over seeds.
The user's figure is :func:`trials_to_within`: per workload, the trials a strategy
needs to find a candidate within 5% of the pool's best.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import tvm
from sklearn.model_selection import GroupKFold

from database import CandidateRecord, MeasureStatus, candidate_latency
from tuner.cost_model.dataset import parse_kernel
from tuner.cost_model.xgb import XGBCostModel
from tuner.space.gemm_seeds import LEADING_SEEDS
from tuner.space.space import ScheduleSpace

from .search import ModelTrainer, pick_batch

STRATEGIES = ("random", "cold", "warm", "shipped")
#: a candidate this much slower than the pool's best still counts as found (5%)
TOLERANCE = 0.05


@dataclass(frozen=True)
class ReplayPool:
    """The measured candidates of one workload.

    Attributes
    ----------
    workload_hash : str
    X : np.ndarray
        float32 [n, d] features.
    latency_s : np.ndarray
        float64 [n] latency in seconds (median over ``ok`` measurements); ``inf`` for a failed candidate.
    first : list of int
        Indices every strategy measures first, in order, as the search does: the
        untuned default and the kernel's leading register-blocked seeds, those that were measured.
    """

    workload_hash: str
    X: np.ndarray
    latency_s: np.ndarray
    first: list[int]


def load_pools(db, target_hash: str, target: tvm.target.Target, min_size: int = 2) -> list[ReplayPool]:
    """One ``ReplayPool`` per workload of ``target_hash`` with at least ``min_size`` measured candidates
    and at least one success."""
    traces: dict[str, dict[str, str]] = defaultdict(dict)
    medians: dict[str, list[float]] = defaultdict(list)
    wrong: set[str] = set()
    for wh, ch, trace, status, median, _ in db.measure_log(target_hash):
        traces[wh][ch] = trace
        if status == MeasureStatus.OK and median is not None and np.isfinite(median) and median > 0:
            medians[ch].append(median)
        if status == MeasureStatus.WRONG_RESULT:
            wrong.add(ch)
    pools = []
    for wh, cands in traces.items():
        workload = db.get_workload(wh)
        if workload is None or len(cands) < min_size:
            continue
        space = ScheduleSpace(parse_kernel(workload.script), wh, target)
        leading = [c.record.candidate_hash for c in [space.default(), *space.seeds()[:LEADING_SEEDS]]]
        replayed, lat = [], []
        for ch, trace in cands.items():
            try:
                cand = space.replay(CandidateRecord(wh, trace))
            except Exception:  # TVM raises several error types for a trace that no longer applies
                continue
            replayed.append(cand)
            lat.append(candidate_latency(medians[ch]) if medians[ch] and ch not in wrong else np.inf)
        if not np.isfinite(lat).any():
            continue
        X = space.feature_matrix(replayed, workload)
        index = {c.record.candidate_hash: i for i, c in enumerate(replayed)}
        pools.append(ReplayPool(wh, X, np.array(lat), [index[h] for h in leading if h in index]))
    return pools


def replay_order(pool: ReplayPool, strategy: str, batch_size: int, explore: float, seed: int,
                 base: XGBCostModel | None = None) -> list[int]:
    """The order in which ``strategy`` would have measured the pool's candidates (indices)."""
    rng = np.random.default_rng(seed)
    trainer = ModelTrainer(base if strategy in ("warm", "shipped") else XGBCostModel(seed=seed))
    order = list(pool.first)
    left = [i for i in range(len(pool.latency_s)) if i not in order]
    share = 1.0 if strategy == "random" else explore

    def score(items: list[int]) -> np.ndarray | None:
        return None if strategy == "random" else trainer.score(pool.X[items])

    first = True
    while left:
        want = batch_size - len(order) if first else batch_size  # the default and seeds share the first batch
        first = False
        batch = pick_batch(left, max(want, 1), score, share, rng)
        order += batch
        taken = set(batch)
        left = [i for i in left if i not in taken]
        for i in order:
            if np.isfinite(pool.latency_s[i]):
                trainer.add(str(i), pool.X[i], float(pool.latency_s[i]), pool.workload_hash)
        if strategy != "random":
            trainer.retrain()
    return order


def curve(pool: ReplayPool, order: list[int], trials: int) -> np.ndarray:
    """[trials] best-so-far score: pool's best latency / best latency among the first t picks (0 if none)."""
    best = np.min(pool.latency_s)
    seen = np.minimum.accumulate(pool.latency_s[order])
    out = np.where(np.isfinite(seen), best / seen, 0.0)
    return np.concatenate([out, np.full(max(trials - len(out), 0), out[-1])])[:trials]


def replay_curves(pools: list[ReplayPool], strategies: list[tuple[str, int, float]], seeds: int = 3,
                  trials: int | None = None, warm_base: XGBCostModel | None = None,
                  shipped: XGBCostModel | None = None) -> dict[str, np.ndarray]:
    """Best-so-far curves per strategy ``(name, batch size, explore share)``: float [seeds, pools, trials].

    ``trials`` defaults to the largest pool (where every strategy has found every
    pool's best). ``warm`` starts every pool from ``warm_base`` when given (a model
    trained on another database, such as an earlier compile's), else from a model
    trained on the other pools; ``shipped`` starts from ``shipped``.

    Raises
    ------
    ValueError
        No pool, an unknown strategy name, or ``shipped`` asked for without a model.
    """
    if not pools:
        raise ValueError("no workload with at least 2 measured candidates and one success to replay")
    for name, _, _ in strategies:
        if name not in STRATEGIES:
            raise ValueError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}")
        if name == "shipped" and shipped is None:
            raise ValueError("the shipped strategy needs the pretrained model, and there is none")
    trials = trials or max(len(p.latency_s) for p in pools)
    if warm_base is not None:
        bases = {p.workload_hash: warm_base for p in pools}
    else:
        bases = _held_out_bases(pools) if any(s[0] == "warm" for s in strategies) else {}
    out = {}
    for name, batch, explore in strategies:
        start = {p.workload_hash: shipped if name == "shipped" else bases.get(p.workload_hash) for p in pools}
        out[f"{name} b={batch} e={explore:g}"] = np.array([
            [curve(p, replay_order(p, name, batch, explore, seed, start[p.workload_hash]), trials) for p in pools]
            for seed in range(seeds)])
    return out


def trials_to_within(curves: np.ndarray, tolerance: float = TOLERANCE) -> np.ndarray:
    """Per pool, the trials needed to find a candidate within ``tolerance`` of the pool's best, mean over seeds.

    ``curves`` is one strategy's float [seeds, pools, trials] from :func:`replay_curves`
    (as long as the largest pool, so every replay gets there). The count of a replay is
    the first t with ``best in pool / best found >= 1 / (1 + tolerance)``; a replay that
    never gets there within the curve's trials counts as NaN.
    """
    reached = curves >= 1.0 / (1.0 + tolerance)
    first = np.where(reached.any(axis=2), reached.argmax(axis=2) + 1.0, np.nan)
    return first.mean(axis=0)


def _held_out_bases(pools: list[ReplayPool]) -> dict[str, XGBCostModel | None]:
    """Per workload, a model trained on other workloads' successes (GroupKFold, at most 5 folds)."""
    if len(pools) < 2:
        return {}
    folds = GroupKFold(n_splits=min(5, len(pools))).split(np.zeros(len(pools)), groups=np.arange(len(pools)))
    bases: dict[str, XGBCostModel | None] = {}
    for train, test in folds:
        ok = [(p.X[np.isfinite(p.latency_s)], p.latency_s[np.isfinite(p.latency_s)], p.workload_hash)
              for p in (pools[i] for i in train)]
        X = np.concatenate([x for x, _, _ in ok])
        y = np.concatenate([t for _, t, _ in ok])
        g = np.concatenate([[w] * len(t) for _, t, w in ok])
        model = XGBCostModel().fit(X, y, g)
        for i in test:
            bases[pools[i].workload_hash] = model
    return bases

"""The search over one kernel's schedules: rank with the cost model, measure a batch, learn.

Each batch takes the candidates the model ranks fastest, plus a share drawn at
random from the rest (exploration, so the model sees what it would not pick).
The pool starts as schedules sampled from the space; after each batch, mutants
of the fastest schedules measured so far join it (MetaSchedule's evolutionary
step, Zheng et al., Ansor, OSDI 2020, section 5.1), so later batches can refine
what worked rather than only draw afresh. Parents are the fastest schedules a
mutator can change (those with sampling decisions): a register-blocked seed has
none, and on a GEMM the seeds are usually the fastest measured, so choosing
parents among all schedules left the mutation step with nothing to mutate.
The untuned default schedule is always measured first, then the kernel's
leading register-blocked GEMM seeds (:mod:`tuner.space.gemm_seeds`), as far as the
budget goes; its other seeds join the pool. The budget counts every
measurement of the workload on the target in the database, so a rerun of the
same job measures nothing already measured.

Every candidate measured is a distinct program: different traces can schedule
a kernel into the same loop nest (a split the simplifier undoes, a mutation of
a decision that changes nothing), so a candidate whose scheduled program
(``ScheduleCandidate.program_hash``) is already measured, queued or pooled is
dropped (see docs/decisions.md, "Every candidate measured is a distinct
program"). A resumed
search knows the programs of the candidates measured before, those that failed
included (the session passes them as ``discounted``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from database import CandidateRecord, MeasureRecord, MeasureStatus, TrainingRow
from tuner.cost_model.xgb import XGBCostModel, valid_rows
from tuner.kernels import Kernel
from tuner.space.gemm_seeds import LEADING_SEEDS
from tuner.space.space import ScheduleCandidate, ScheduleSpace

from .stop import SearchStop


@dataclass(frozen=True)
class SearchConfig:
    """Knobs of the search.

    Parameters
    ----------
    trials : int
        Measurements per workload (the default schedule included); 0 measures nothing.
    batch_size : int
        Candidates measured between two retrainings of the cost model.
    explore : float
        Share of each batch chosen at random rather than by the model.
    pool_factor : int
        Candidates sampled from the space per trial of budget left; also the
        mutants added to the pool after a batch, per candidate of a batch.
    parents : int
        Fastest measured schedules whose mutants join the pool after each batch
        (0: sampling only).
    seed : int
        Seed of the sampler and of the exploration draw.
    confirm_top : int
        Fastest candidates measured again once the budget is spent, those within
        ``tuner.search.confirm.MARGIN`` of the fastest (0: none; see :mod:`tuner.search.confirm`).
    confirm_measurements : int
        Measurements each of those ends with; its latency is their median.
    """

    trials: int = 64
    batch_size: int = 8
    explore: float = 0.25
    pool_factor: int = 4
    parents: int = 4
    seed: int = 0
    confirm_top: int = 3
    confirm_measurements: int = 3


@dataclass(frozen=True)
class KernelOutcome:
    """What the search did for one kernel: the stop reason and measurement counts."""

    workload_hash: str
    stop_reason: SearchStop
    measured_before: int
    measured_now: int


class ModelTrainer:
    """The cost model and its training set (features, latencies, workloads), retrained per batch.

    Parameters
    ----------
    model : XGBCostModel or None
        A fitted model from an earlier compile (warm start): it ranks until this
        run has ``min_rows`` measurements, and each retraining then continues it
        with ``warm_rounds`` more trees instead of forgetting it. An unfitted
        model gives the objective and parameters of a model trained from nothing.
    min_rows : int
        Fewest measurements the model is (re)trained on.
    warm_rounds : int
        Trees added to a warm model per retraining.
    """

    def __init__(self, model: XGBCostModel | None = None, min_rows: int = 4, warm_rounds: int = 50) -> None:
        self.model = model or XGBCostModel()
        self.base = self.model if self.model.fitted else None
        self.min_rows, self.warm_rounds = min_rows, warm_rounds
        self._rows: dict[str, tuple[np.ndarray, float, str]] = {}

    def add(self, candidate_hash: str, features: np.ndarray, latency_s: float, workload_hash: str = "") -> None:
        """Add (or replace) one measured candidate; a zero or non-finite latency is ignored."""
        if latency_s is not None and valid_rows(np.array([latency_s]))[0]:
            self._rows[candidate_hash] = (features, float(latency_s), workload_hash)

    def __len__(self) -> int:
        return len(self._rows)

    def retrain(self) -> None:
        """Refit on every row so far (no-op with fewer than ``min_rows`` rows)."""
        if len(self._rows) < self.min_rows:
            return
        rows = list(self._rows.values())
        X = np.stack([f for f, _, _ in rows])
        y = np.array([t for _, t, _ in rows])
        groups = np.array([w for _, _, w in rows])
        model = XGBCostModel(**(self.base or self.model).get_params())
        self.model = model.fit(X, y, groups, base=self.base, rounds=self.warm_rounds if self.base else None)

    def predict(self, X: np.ndarray) -> np.ndarray | None:
        """Predicted latencies in seconds, or None while the model is untrained."""
        return self.model.predict_latency(X) if self.model.fitted else None

    def score(self, X: np.ndarray) -> np.ndarray | None:
        """Ranking scores (higher is faster within a workload), or None while the model is untrained."""
        return self.model.score(X) if self.model.fitted else None


class BudgetTaken(Exception):
    """Raised by a measure function when other sessions hold the rest of the workload's budget.

    Their measurements and live claims take what is left of ``trials`` on the
    target, so this session may measure nothing more of the workload.
    """


MeasureFn = Callable[[Kernel, list[ScheduleCandidate]], list[MeasureRecord]]


def resume_state(db, workload_hash: str, target_hash: str
                 ) -> tuple[dict[str, MeasureRecord], list[TrainingRow], list[CandidateRecord]]:
    """Where a search of a workload on a target resumes from: ``measured``, ``history`` and
    ``discounted`` for :func:`tune_kernel`, read from ``db`` (a ``database.Database``)."""
    measured = db.measured_candidates(workload_hash, target_hash)
    history = db.training_rows(target_hash, [workload_hash])
    counted = {row.candidate_hash for row in history}
    traces = db.candidate_traces(workload_hash, [h for h in measured if h not in counted])
    return measured, history, [CandidateRecord(workload_hash, trace) for trace in traces.values()]


def tune_kernel(
    kernel: Kernel,
    space: ScheduleSpace,
    measured: dict[str, MeasureRecord],
    history: list[TrainingRow],
    trainer: ModelTrainer,
    measure: MeasureFn,
    config: SearchConfig,
    on_batch: Callable[[Kernel, list[MeasureRecord]], None] = lambda k, r: None,
    discounted: Sequence[CandidateRecord] = (),
) -> KernelOutcome:
    """Spend what is left of the workload's budget; returns why the search stopped.

    ``measured`` maps candidate hashes already measured on this target (from the
    database) to their latest result; it is updated in place. ``history`` holds the
    workload's successful measurements on this target (from the database), which
    the cost model learns before the first batch. ``discounted`` holds the
    candidates measured before that do not count (failed, timed out, wrong
    result): their programs are not measured again under another trace.
    :func:`resume_state` reads all three from a database.

    ``measure`` may return records for only part of a batch (candidates another
    live session has claimed are skipped); a skipped candidate leaves the pool
    and is not counted, so the budget counts recorded measurements only and the
    search ends when the pool runs dry (``SearchStop.SPACE_EXHAUSTED``). ``measure`` raises
    :class:`BudgetTaken` when other sessions hold the rest of the budget: the
    search stops there (``SearchStop.BUDGET_TAKEN``).
    """
    before = len(measured)
    rng = np.random.default_rng(config.seed)
    seen: dict[str, ScheduleCandidate] = {}  # measured schedules, the parents of mutants
    if history:
        replayed = [space.replay(CandidateRecord(row.workload_hash, row.trace_json)) for row in history]
        seen.update((c.record.candidate_hash, c) for c in replayed)
        for x, row in zip(space.feature_matrix(replayed, kernel.workload), history):
            trainer.add(row.candidate_hash, x, row.median_s, kernel.workload.workload_hash)
        trainer.retrain()
    left = config.trials - len(measured)
    if config.trials == 0:
        return KernelOutcome(kernel.workload.workload_hash, SearchStop.NO_BUDGET, before, 0)
    if left <= 0:
        return KernelOutcome(kernel.workload.workload_hash, SearchStop.ALREADY_TUNED, before, 0)
    # programs measured (those that failed too) or waiting in the queue or pool
    programs = {c.program_hash for c in seen.values()} | {space.replay(r).program_hash for r in discounted}

    def new_programs(cands: list[ScheduleCandidate], limit: int | None = None) -> list[ScheduleCandidate]:
        out = []
        for c in cands:
            if limit is not None and len(out) == limit:
                break
            if c.record.candidate_hash not in measured and c.program_hash not in programs:
                programs.add(c.program_hash)
                out.append(c)
        return out

    seeds = space.seeds()
    default = space.default()
    queue = new_programs([default, *seeds[:LEADING_SEEDS]], limit=left)
    pool = new_programs(space.sample(max(config.pool_factor * left, 16)) + seeds[LEADING_SEEDS:])

    def score(cands: list[ScheduleCandidate]) -> np.ndarray | None:
        if not trainer.model.fitted:
            return None
        return trainer.score(space.feature_matrix(cands, kernel.workload))

    stop = SearchStop.BUDGET
    while len(measured) < config.trials:
        want = min(config.batch_size, config.trials - len(measured)) - len(queue)
        batch = queue + pick_batch(pool, max(want, 0), score, config.explore, rng)
        queue = []
        if not batch:
            stop = SearchStop.SPACE_EXHAUSTED
            break
        chosen = {c.record.candidate_hash for c in batch}
        pool = [c for c in pool if c.record.candidate_hash not in chosen]
        try:
            results = measure(kernel, batch)
        except BudgetTaken:
            stop = SearchStop.BUDGET_TAKEN
            break
        for record in results:
            measured[record.candidate_hash] = record
        _learn(trainer, space, kernel, batch, measured)
        trainer.retrain()
        on_batch(kernel, results)
        seen.update((c.record.candidate_hash, c) for c in batch)
        if config.parents and len(measured) < config.trials:
            parents = _fastest({h: c for h, c in seen.items() if space.mutable(c)}, measured, config.parents)
            pool += new_programs(space.mutate(parents, config.pool_factor * config.batch_size))
    return KernelOutcome(kernel.workload.workload_hash, stop, before, len(measured) - before)


def _fastest(seen: dict[str, ScheduleCandidate], measured: dict[str, MeasureRecord], n: int
             ) -> list[ScheduleCandidate]:
    """The ``n`` schedules of ``seen`` with the least successful measured latency."""
    ok = [(measured[h].median_s, h) for h in seen if h in measured and measured[h].status == MeasureStatus.OK
          and math.isfinite(measured[h].median_s) and measured[h].median_s > 0]
    return [seen[h] for _, h in sorted(ok)[:n]]


def _learn(trainer, space, kernel, candidates, measured) -> None:
    ok = [c for c in candidates if measured.get(c.record.candidate_hash, None) is not None
          and measured[c.record.candidate_hash].status == MeasureStatus.OK]
    if not ok:
        return
    for cand, x in zip(ok, space.feature_matrix(ok, kernel.workload)):
        trainer.add(cand.record.candidate_hash, x, measured[cand.record.candidate_hash].median_s,
                    kernel.workload.workload_hash)


def pick_batch(pool: list, n: int, score: Callable[[list], np.ndarray | None], explore: float,
               rng: np.random.Generator) -> list:
    """Choose ``n`` items of ``pool``: the highest scored, plus ``floor(n * explore)`` (at least 1 when
    ``n > 1``) drawn at random from the rest. ``score(pool)`` returns one score per item (higher is
    faster) or None while there is no model, in which case the whole batch is random.
    """
    if n <= 0 or not pool:
        return []
    n = min(n, len(pool))
    scores = score(pool)
    if scores is None:
        return [pool[i] for i in rng.choice(len(pool), size=n, replace=False)]
    n_explore = max(1, math.floor(n * explore)) if n > 1 and explore > 0 else 0
    order = list(np.argsort(-np.asarray(scores), kind="stable"))
    exploit = order[: n - n_explore]
    taken = set(exploit)
    rest = [i for i in order if i not in taken]
    explore_idx = list(rng.choice(rest, size=min(n_explore, len(rest)), replace=False)) if rest else []
    return [pool[i] for i in exploit + explore_idx]

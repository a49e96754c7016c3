"""Judging the cost model where it matters: on architectures and CPUs its training never saw.

Over a data set file's rows (:mod:`tuner.cost_model.corpus`):

- ``arch``: the judged rows are those of workloads that came from a model whose name
  starts with ``arch`` (``llama`` holds out every Llama; ``qwen3-1.7b`` one size);
  the model is trained on the workloads of no such model (a kernel Llama shares
  with Qwen is held out with Llama: the training never sees it);
- ``cpu``: the judged rows are those measured on a CPU whose description
  (:func:`database.dataset_file.record_cpu`) contains ``cpu``; the training rows the
  others.

Both at once intersect. The figures are :func:`tuner.cost_model.evaluate.metrics`'
with each judged candidate's repeat-halves noise, so ``pairwise_distinct`` (the pairs
the measurements themselves tell apart) stands beside the plain pairwise.
"""

from __future__ import annotations

import numpy as np

from .corpus import Corpus
from .evaluate import fit_scorer, metrics


def heldout_masks(corpus: Corpus, arch: str | None = None, cpu: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Boolean masks [n] of the training and the judged rows (see the module docstring).

    Raises
    ------
    ValueError
        Neither ``arch`` nor ``cpu`` given, or either side is empty (the message
        names the models or CPUs the data set holds).
    """
    if not arch and not cpu:
        raise ValueError("name what to hold out: --hold-out-arch NAME and/or --hold-out-cpu TEXT")
    train = np.ones(len(corpus.data), bool)
    test = train.copy()
    if arch:
        held = {w for w, models in zip(corpus.workloads, corpus.models) if any(m.startswith(arch) for m in models)}
        mine = np.isin(corpus.workloads, sorted(held))
        train &= ~mine
        test &= mine
    if cpu:
        mine = np.array([cpu.lower() in c.lower() for c in corpus.cpu], bool)
        train &= ~mine
        test &= mine
    for rows, side in ((test, "judged"), (train, "training")):
        if not rows.any():
            models = sorted({m for ms in corpus.models for m in ms})
            raise ValueError(f"no {side} rows when holding out {_what(arch, cpu)}: the data set's models are "
                             f"{', '.join(models) or 'none'}; its CPUs {', '.join(sorted(set(corpus.cpu))) or 'none'}")
    return train, test


def evaluate_heldout(corpus: Corpus, arch: str | None = None, cpu: str | None = None, models: tuple[str, ...] = (),
                     seed: int = 0, min_candidates: int = 2, xgb_params: dict | None = None) -> dict:
    """Each model of ``models`` (names of :data:`tuner.cost_model.evaluate.MODELS`) trained on the training rows
    and judged on the held-out ones.

    Returns ``{held_out, train_records, train_workloads, judged_records, judged_workloads, models}``,
    ``models`` mapping each name to :func:`tuner.cost_model.evaluate.metrics` (``pairwise_distinct`` included).

    Raises
    ------
    ValueError
        As :func:`heldout_masks`.
    """
    train, test = heldout_masks(corpus, arch, cpu)
    d = corpus.data
    results = {}
    for name in models:
        scorer = fit_scorer(name, d.X[train], d.latency_s[train], d.groups[train], seed, xgb_params)
        results[name] = metrics(d.latency_s[test], scorer(d.X[test]), d.groups[test], d.kinds[test], min_candidates,
                                corpus.noise_s[test])
    return {"held_out": _what(arch, cpu), "train_records": int(train.sum()),
            "train_workloads": len(set(d.groups[train].tolist())), "judged_records": int(test.sum()),
            "judged_workloads": len(set(d.groups[test].tolist())), "models": results}


def _what(arch: str | None, cpu: str | None) -> str:
    return " and ".join(part for part in (arch and f"architecture {arch!r}", cpu and f"CPU {cpu!r}") if part)

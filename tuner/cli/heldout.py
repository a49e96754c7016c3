"""``tune model eval --hold-out-arch / --hold-out-cpu``: the cost model judged on a data set file's unseen models and
CPUs."""

from __future__ import annotations

from .figures import by_kind_lines, emit, with_interval, workloads_text

METRICS = ("top1", "top5", "pairwise", "pairwise_distinct", "spearman")
HEADS = ("top-1", "top-5", "pairwise", "pairwise distinct", "spearman")


def heldout_eval(dataset: str | None, arch: str | None, cpu: str | None, models: tuple[str, ...], seed: int,
                 min_candidates: int, xgb_params: dict, as_json: bool) -> None:
    """Print :func:`tuner.cost_model.heldout.evaluate_heldout` over the data set file ``dataset`` (default: the
    repository's) for each of ``arch`` (comma-separated names) in turn, or for ``cpu``.

    Raises
    ------
    ValueError, database.dataset_file.DatasetFileError
        An unusable file, or nothing to train on or judge.
    """
    from tuner.cost_model.corpus import load_corpus
    from tuner.cost_model.evaluate import CONFIDENCE
    from tuner.cost_model.heldout import evaluate_heldout
    from tuner.cost_model.shipped import DATASET_PATH

    corpus = load_corpus(dataset or DATASET_PATH)
    archs = [a.strip() for a in arch.split(",")] if arch else [None]
    runs = [evaluate_heldout(corpus, a, cpu, models, seed, min_candidates, xgb_params) for a in archs]
    lines = [f"{len(corpus.data)} measured candidates of {corpus.data.n_workloads} workloads "
             f"({corpus.data.skipped} skipped); each figure is the mean over the judged workloads with at least "
             f"{min_candidates} candidates [its {CONFIDENCE:.0%} bootstrap interval over workloads]; pairwise "
             "distinct: over the pairs whose latencies differ by more than their repeat-halves noise"]
    for run in runs:
        judged = next(iter(run["models"].values()))["workloads"]
        lines += [f"held out {run['held_out']}: trained on {run['train_records']} candidates of "
                  f"{run['train_workloads']} workloads, judged on {run['judged_records']} candidates of "
                  f"{run['judged_workloads']} workloads ({workloads_text(judged)} judged)",
                  f"{'model':<20} " + " ".join(f"{h:>19}" for h in HEADS)]
        lines += [f"{name:<20} " + " ".join(f"{with_interval(r, m):>19}" for m in METRICS)
                  for name, r in run["models"].items()]
        lines += by_kind_lines(run["models"])
    emit(as_json, {"records": len(corpus.data), "workloads": corpus.data.n_workloads, "min_candidates": min_candidates,
                   "confidence": CONFIDENCE, "heldout": runs}, lines)

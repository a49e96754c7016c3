"""Held-out architectures and CPUs over a data set file; pairwise accuracy over the pairs measurements tell apart."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from tuner.cli import app
from tuner.cli.errors import main_guard
from tuner.cost_model.corpus import load_corpus
from tuner.cost_model.evaluate import distinct_pairwise_accuracy, pairwise_accuracy, repeat_noise
from tuner.cost_model.heldout import evaluate_heldout, heldout_masks


def test_distinct_pairwise_counts_only_pairs_apart_by_more_than_their_noise():
    latency = np.array([1.0, 1.05, 2.0])
    score = np.array([1.0, 2.0, 0.0])  # orders 1.0 and 1.05 wrongly, both against 2.0 rightly
    assert pairwise_accuracy(latency, score) == pytest.approx(2 / 3)
    assert distinct_pairwise_accuracy(latency, score, np.array([0.1, 0.1, 0.1])) == 1.0  # 1.0 vs 1.05 is noise
    assert distinct_pairwise_accuracy(latency, score, np.zeros(3)) == pytest.approx(2 / 3)
    assert distinct_pairwise_accuracy(latency, score, np.full(3, np.nan)) is None
    assert repeat_noise([1.0, 3.0, 2.0, 2.5]) == pytest.approx(0.25)  # medians 2.0 and 2.25
    assert np.isnan(repeat_noise([1.0]))


@pytest.fixture(scope="module")
def corpus(synthetic_dataset):
    return load_corpus(synthetic_dataset.path)


def test_corpus_knows_which_model_and_cpu_measured_each_row(corpus):
    assert len(set(corpus.workloads)) == 3 and len(corpus.data) == len(corpus.cpu) == len(corpus.noise_s)
    by_model = {m: set(corpus.cpu[[ms == (m,) for ms in corpus.models]]) for m in ("llama-3.2-1b", "qwen3-0.6b")}
    assert by_model == {"llama-3.2-1b": {"CPU A (a)"}, "qwen3-0.6b": {"CPU B (b)"}}
    assert np.all(corpus.noise_s > 0)


def test_held_out_architecture_is_never_trained_on(corpus):
    train, test = heldout_masks(corpus, arch="llama")
    assert set(corpus.workloads[test]) & set(corpus.workloads[train]) == set()
    assert all("llama-3.2-1b" in ms for ms in corpus.models[test])
    out = evaluate_heldout(corpus, arch="llama", models=("xgb:rank:pairwise", "random"))
    assert out["judged_workloads"] == 1 and out["train_workloads"] == 2
    for result in out["models"].values():
        assert result["workloads"] == 1 and 0 <= result["pairwise"] <= 1 and "pairwise_distinct" in result
    cpu = evaluate_heldout(corpus, cpu="cpu b", models=("random",))
    assert (cpu["judged_workloads"], cpu["train_workloads"]) == (2, 1)
    with pytest.raises(ValueError, match="no judged rows .* models are llama-3.2-1b, qwen3-0.6b"):
        heldout_masks(corpus, arch="mistral")


def test_eval_command_on_held_out_architectures(monkeypatch, capsys, synthetic_dataset):
    monkeypatch.setattr(sys, "argv", ["tune", "model", "eval", "--dataset", str(synthetic_dataset.path),
                                      "--hold-out-arch", "llama,qwen3", "--models", "random", "--json"])
    with pytest.raises(SystemExit) as done:
        main_guard(app)
    assert done.value.code == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["held_out"] for r in out["heldout"]] == ["architecture 'llama'", "architecture 'qwen3'"]
    assert [r["judged_workloads"] for r in out["heldout"]] == [1, 2]

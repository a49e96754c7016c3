"""The cost model and its metrics on hand-computable and synthetic cases (no TVM compile)."""

import json

import numpy as np
import pytest

from database import DEFAULT_TRACE_JSON, WorkloadRecord
from tuner.analysis.cost_model import feature_names
from tuner.cost_model.evaluate import pairwise_accuracy, ranking_metrics, spearman, topk_score
from tuner.cost_model.trace_features import N_TRACE_FEATURES, trace_features
from tuner.cost_model.xgb import (
    N_FEATURES,
    OBJECTIVES,
    CostModelError,
    XGBCostModel,
    featurize,
    labels,
    workload_features,
)
from tuner.search.search import ModelTrainer


def _workload(flops=1e6, nbytes=1e4):
    return WorkloadRecord("w", "k", "matmul", "", "[]", flops, nbytes)


def test_topk_score_by_hand():
    latency = np.array([1.0, 2.0, 4.0, 8.0])
    assert topk_score(latency, np.array([4, 3, 2, 1]), 1) == 1.0
    assert topk_score(latency, np.array([1, 2, 3, 4]), 1) == 1.0 / 8.0
    assert topk_score(latency, np.array([1, 2, 4, 3]), 2) == 1.0 / 4.0
    assert topk_score(latency, np.array([1, 2, 3, 4]), 5) == 1.0


def test_pairwise_and_spearman_by_hand():
    latency = np.array([1.0, 2.0, 3.0])
    assert pairwise_accuracy(latency, np.array([3, 2, 1])) == 1.0
    assert pairwise_accuracy(latency, np.array([1, 2, 3])) == 0.0
    assert pairwise_accuracy(latency, np.array([3, 1, 2])) == pytest.approx(2 / 3)
    assert pairwise_accuracy(latency, np.array([1, 1, 1])) == 0.5  # ties in score count half
    assert pairwise_accuracy(np.array([2.0, 2.0]), np.array([1, 0])) is None
    assert spearman(latency, np.array([3, 2, 1])) == pytest.approx(1.0)
    assert spearman(latency, np.array([1, 1, 1])) is None


def test_ranking_metrics_skip_single_candidate_workloads():
    latency = np.array([1.0, 2.0, 5.0, 1.0])
    score = np.array([0.0, 1.0, 0.0, 9.0])
    groups = np.array(["a", "a", "a", "b"])
    m = ranking_metrics(latency, score, groups)
    assert m["workloads"] == 1 and m["top1"] == 0.5 and m["top5"] == 1.0
    assert m["pairwise"] == 0.5  # (1,2) wrong, (1,5) tie: half, (2,5) right


def test_ranking_metrics_leave_out_workloads_below_min_candidates():
    latency = np.array([1.0, 2.0, 5.0, 1.0, 2.0])
    score = np.array([0.0, 1.0, 0.0, 1.0, 0.0])
    groups = np.array(["a", "a", "a", "b", "b"])
    assert ranking_metrics(latency, score, groups)["workloads"] == 2
    m = ranking_metrics(latency, score, groups, min_candidates=3)
    assert m["workloads"] == 1 and m["pairwise"] == 0.5  # b (ordered right) is left out
    with pytest.raises(ValueError, match="at least 2 candidates"):
        ranking_metrics(latency, score, groups, min_candidates=1)


def test_mean_interval_is_a_bootstrap_of_the_workload_mean():
    from tuner.cost_model.evaluate import mean_interval

    assert mean_interval([0.7]) is None and mean_interval([]) is None
    assert mean_interval([1.0, 1.0, 1.0]) == [1.0, 1.0]
    coin = [0.0, 1.0] * 50  # 100 workloads scored 0 or 1: standard error sqrt(0.25 / 100) = 0.05
    low, high = mean_interval(coin)
    assert low < 0.5 < high and 0.16 < high - low < 0.24  # about 2 * 1.96 * 0.05 = 0.196 wide
    low4, high4 = mean_interval(coin[:8] * 2)  # 16 workloads: about 2.5 times as wide
    assert high4 - low4 > 2 * (high - low)
    assert 0.0 <= low4 and high4 <= 1.0
    # a mean of values just under 1 rounds a step below them: the interval still holds the mean
    for values in ([0.9999999999999999] * 5, [0.9999999999999998, 0.9999999999999999, 1.0, 0.9999999999999999]):
        low, high = mean_interval(values)
        assert low <= float(np.mean(values)) <= high


def test_labels_never_infinite_and_normalised_per_workload():
    latency = np.array([1e-3, 2e-3, 1.0, 4.0])
    groups = np.array(["a", "a", "b", "b"])
    assert np.allclose(labels("reg:normalized", latency, groups), [1, 0.5, 1, 0.25])
    assert np.allclose(labels("rank:ndcg", latency, groups), [30, 15, 30, 8])


def test_featurize_replaces_nan_and_inf():
    per_store = np.full((2, 164), np.nan, np.float32)
    per_store[1, :3] = [np.inf, -np.inf, 5.0]
    vec = featurize(per_store, _workload(flops=0.0, nbytes=0.0), DEFAULT_TRACE_JSON)
    assert vec.shape == (N_FEATURES,) == (4 * 164 + 9 + N_TRACE_FEATURES,) and np.isfinite(vec).all()
    assert featurize(np.zeros((0, 164)), _workload(), DEFAULT_TRACE_JSON).shape == (N_FEATURES,)


def test_featurize_carries_the_row_of_the_store_with_the_most_arithmetic():
    per_store = np.zeros((3, 164), np.float32)
    per_store[0, 161] = 9.0  # an initialisation store: large loop product, no arithmetic
    per_store[1, :3] = [6.0, 6.0, 0.0]  # the multiply-accumulate update
    per_store[1, 39] = 3.0
    per_store[2, 1] = 7.0  # an epilogue add
    vec = featurize(per_store, _workload(), DEFAULT_TRACE_JSON)
    assert np.array_equal(vec[3 * 164:4 * 164], per_store[1])
    assert vec[2 * 164 + 1] == 7.0  # the max over stores still sees the epilogue
    assert len(feature_names()) == N_FEATURES == vec.shape[0]


# A trace of MetaSchedule's multi-level tiling, cut to its sampling instructions: a spatial loop split
# into 4 tiles, a reduction loop into 2, an unroll step and a compute location.
TILED_TRACE = json.dumps([
    [["GetSBlock", [], ["C", "main"], ["b0"]], ["SamplePerfectTile", ["l1"], [4, 64], ["v2", "v3", "v4", "v5"]],
     ["Split", ["l1", "v2", "v3", "v4", "v5"], [], ["l6", "l7", "l8", "l9"]],
     ["SamplePerfectTile", ["l10"], [2, 64], ["v11", "v12"]], ["Vectorize", ["l9"], [], []],
     ["SampleCategorical", [], [[0, 16, 64], [0.3, 0.3, 0.4]], ["v13"]],
     ["SampleComputeLocation", ["b0"], [], ["l14"]]],
    [[1, [2, 4, 8, 16]], [3, [32, 4]], [5, 2], [6, -1]]])


def test_trace_features_read_tiles_unroll_and_instructions():
    f = trace_features(TILED_TRACE)
    assert f.shape == (N_TRACE_FEATURES,)
    assert list(f[:6]) == [1, 2, 3, 4, 5, 2]  # log2 of each tile level: spatial 4-way, then reduction 2-way
    assert list(f[6:9]) == [2, 4, 7]  # unroll choice, decisions, instructions
    assert f[9] == 1.0 and f[12] == 1.0  # log2(1 + 1): one Split, one Vectorize
    assert list(f[-2:]) == [-1, -1]  # the compute location: root
    untuned = trace_features(DEFAULT_TRACE_JSON)
    assert (untuned[:6] == 0).all() and untuned[6] == -3 and (untuned[-2:] == -3).all()
    with pytest.raises(ValueError, match="not a trace"):
        trace_features("{}")


def test_workload_features_read_the_shapes():
    w = WorkloadRecord("w", "k", "matmul", "", json.dumps([{"shape": [1, 2048], "dtype": "float32"},
                                                         {"shape": [4096, 2048], "dtype": "float32"},
                                                         {"shape": [1, 4096], "dtype": "float32"}]), 2 ** 24, 2 ** 22)
    f = workload_features(w, 2)
    assert list(f[:4]) == [24, 22, 2, 1]
    assert f[4:7] == pytest.approx(np.log2([4097, 2, 1]))  # output extents, largest first; a missing one is 0
    assert f[7:9] == pytest.approx(np.log2([1 + 4096 * 2048, 1 + 2048]))  # input elements, largest first
    assert (workload_features(_workload(), 1)[4:] == 0).all()  # no shapes recorded


def _synthetic(n_groups=6, per_group=20, seed=0):
    rng = np.random.default_rng(seed)
    X, lat, groups = [], [], []
    for g in range(n_groups):
        for _ in range(per_group):
            per_store = rng.random((2, 164)).astype(np.float32)
            w = _workload(flops=10 ** (5 + g))
            X.append(featurize(per_store, w, DEFAULT_TRACE_JSON))
            lat.append((g + 1) * 1e-4 * np.exp(2 * per_store[0, 0] - per_store[1, 1]))
            groups.append(f"w{g}")
    return np.stack(X), np.array(lat), np.array(groups)


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_every_objective_ranks_a_learnable_signal(objective):
    X, lat, groups = _synthetic()
    model = XGBCostModel(objective=objective, n_estimators=40).fit(X, lat, groups)
    m = ranking_metrics(lat, model.score(X), groups)
    assert m["top1"] > 0.9
    if objective != "rank:ndcg":  # NDCG weighs the top of the ranking only
        assert m["pairwise"] > 0.8
    pred = model.predict_latency(X)
    assert np.corrcoef(np.log(pred), np.log(lat))[0, 1] > 0.8
    again = XGBCostModel.load(model.save())
    assert np.allclose(again.score(X), model.score(X)) and again.objective == objective


def test_zero_and_nonfinite_latencies_are_dropped():
    X, lat, groups = _synthetic(n_groups=2, per_group=8)
    lat[0], lat[1], lat[2] = 0.0, np.inf, np.nan
    model = XGBCostModel(n_estimators=5).fit(X, lat, groups)
    assert model.n_records_ == len(lat) - 3
    with pytest.raises(ValueError, match="finite positive"):
        XGBCostModel(n_estimators=5).fit(X[:2], np.zeros(2))
    trainer = ModelTrainer()
    trainer.add("c0", X[0], 0.0, "w")
    trainer.add("c1", X[1], float("nan"), "w")
    assert len(trainer) == 0


def test_corrupt_or_foreign_model_is_refused():
    with pytest.raises(CostModelError, match="corrupt"):
        XGBCostModel.load(b"\x00not a model")
    with pytest.raises(CostModelError, match="corrupt"):
        XGBCostModel.load(b'{"params": {}, "boosters": {"score": "{", "latency": "{"}}')
    with pytest.raises(CostModelError, match="feature version"):
        XGBCostModel.load(b'{"feature_version": "other/v0"}')


def test_warm_trainer_continues_the_stored_model():
    X, lat, groups = _synthetic(n_groups=3, per_group=10)
    warm = XGBCostModel(n_estimators=20).fit(X, lat, groups)
    trainer = ModelTrainer(warm, warm_rounds=5)
    assert trainer.score(X) is not None  # ranks before this run measured anything
    for i in range(4):
        trainer.add(f"c{i}", X[i], lat[i], groups[i])
    trainer.retrain()
    assert trainer.model.score_booster_.num_boosted_rounds() == 25
    assert trainer.model.n_records_ == len(lat) + 4


def test_evaluation_reports_each_op_kind_on_its_own():
    from tuner.cost_model.dataset import Dataset
    from tuner.cost_model.evaluate import evaluate

    X, lat, groups = _synthetic(n_groups=4, per_group=8)
    kinds = np.where(np.isin(groups, ["w0", "w1"]), "matmul", "reduction").astype(object)
    data = Dataset(X, lat, groups.astype(object), np.arange(len(lat)).astype(str).astype(object), kinds)
    out = evaluate(data, models=("xgb:reg:latency", "random"))
    for name, m in out.items():
        assert set(m["by_kind"]) == {"matmul", "reduction"}
        assert m["by_kind"]["matmul"]["workloads"] == m["by_kind"]["reduction"]["workloads"] == 2
        # each kind's figure is the mean over its workloads, so the overall mean lies between them
        lo, hi = sorted(m["by_kind"][k]["pairwise"] for k in ("matmul", "reduction"))
        assert lo - 1e-12 <= m["pairwise"] <= hi + 1e-12, name


def test_repeat_agreement_ranks_each_candidate_by_its_first_half_against_its_second():
    from tuner.cost_model.dataset import Dataset
    from tuner.cost_model.evaluate import repeat_agreement

    hashes = np.array(["a", "b", "c", "d", "e"], dtype=object)
    groups = np.array(["w0", "w0", "w1", "w1", "w1"], dtype=object)
    data = Dataset(np.zeros((5, N_FEATURES), np.float32), np.ones(5), groups, hashes,
                   np.array(["matmul"] * 5, dtype=object))
    repeats = {
        "a": (1.0, 1.0, 2.0, 2.0),  # w0: the halves disagree (a first faster, then slower than b)
        "b": (1.5, 1.5, 1.5),       # 3 repeats: first half (1.5, 1.5), second (1.5,)
        "c": (1.0, 1.1), "d": (2.0, 2.1),  # w1: the halves agree
        "e": (0.5,),                # one repeat: cannot be split, left out
    }
    out = repeat_agreement(repeats, data)
    assert out["workloads"] == 2
    assert out["pairwise"] == pytest.approx((0.0 + 1.0) / 2)
    assert out["top1"] == pytest.approx((1.5 / 2.0 + 1.0) / 2)  # w0's first half picks a: 2.0 by the second
    only_w1 = repeat_agreement(repeats, data, rows=groups == "w1")
    assert only_w1["workloads"] == 1 and only_w1["pairwise"] == 1.0 and only_w1["by_kind"]["matmul"]["workloads"] == 1

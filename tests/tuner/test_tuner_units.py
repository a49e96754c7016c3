"""Units of the tuner: kernels of a program, the schedule space, the cost model."""

from __future__ import annotations

import numpy as np
import pytest

from database import DEFAULT_TRACE_JSON
from extract import load_model
from measure.tvmapi import make_target
from tuner.cost_model.xgb import FEATURE_VERSION, XGBCostModel, featurize
from tuner.kernels import kernel_reference, kernels_of, lower_to_kernels
from tuner.space.space import ScheduleSpace


@pytest.fixture(scope="module")
def kernels():
    model = load_model("qwen3-tiny", stage="prefill", seq_len=8)
    return kernels_of(lower_to_kernels(model.mod))


def test_kernels_are_workloads_with_counts(kernels):
    hashes = [k.workload.workload_hash for k in kernels]
    assert len(hashes) == len(set(hashes)), "one kernel per workload"
    matmuls = [k for k in kernels if k.workload.op_kind == "matmul"]
    assert matmuls and all(k.workload.flops > 0 for k in matmuls)
    # q_proj and o_proj are both 64x64 GEMMs on 8 tokens: one workload called twice
    assert any(k.calls == 2 for k in matmuls)
    assert all(k.workload.bytes_moved > 0 for k in kernels)


def test_reference_is_the_unscheduled_kernel(kernels):
    kernel = max(kernels, key=lambda k: k.workload.flops)
    ref = kernel_reference(kernel)
    outputs = ref.arrays[len(ref.arrays) - ref.n_outputs :]
    assert all(np.isfinite(o).all() for o in outputs)
    again = kernel_reference(kernel)
    assert all(np.array_equal(a, b) for a, b in zip(ref.arrays, again.arrays)), "fixed inputs"


def test_space_samples_distinct_replayable_schedules(kernels):
    kernel = max(kernels, key=lambda k: k.workload.flops)
    space = ScheduleSpace(kernel.func, kernel.workload.workload_hash, make_target({"kind": "llvm", "num-cores": 2}))
    assert space.default().record.trace_json == DEFAULT_TRACE_JSON
    sampled = space.sample(8)
    assert len(sampled) >= 2
    assert len({c.record.candidate_hash for c in sampled}) == len(sampled)
    replayed = space.replay(sampled[0].record)
    assert replayed.mod.script() == sampled[0].mod.script()
    features = space.features([space.default()] + sampled)
    assert all(f.shape[1] == 164 for f in features)


def test_cost_model_learns_and_round_trips(kernels):
    kernel = max(kernels, key=lambda k: k.workload.flops)
    rng = np.random.default_rng(0)
    X = np.stack([featurize(rng.random((3, 164)).astype(np.float32), kernel.workload, DEFAULT_TRACE_JSON)
                  for _ in range(64)])
    latency = np.exp(-X[:, 0])  # a latency that depends on the features
    model = XGBCostModel(n_estimators=50).fit(X, latency)
    pred = model.predict_latency(X)
    assert np.corrcoef(np.log(pred), np.log(latency))[0, 1] > 0.9
    again = XGBCostModel.load(model.save())
    assert np.allclose(again.predict_latency(X), pred)
    assert FEATURE_VERSION


def _largest_kernel_space(kernels):
    """The layer's kernel with the most FLOPs (a GEMM) and its schedule space on a 2-core CPU."""
    kernel = max(kernels, key=lambda k: k.workload.flops)
    return kernel, ScheduleSpace(kernel.func, kernel.workload.workload_hash,
                                 make_target({"kind": "llvm", "num-cores": 2}))


def _trained_on(kernel, space, cands, latency):
    """A trainer whose model learnt ``latency`` (seconds) of ``cands``, and their feature rows."""
    from tuner.search.search import ModelTrainer

    X = space.feature_matrix(cands, kernel.workload)
    model = XGBCostModel(n_estimators=50).fit(X, latency, [kernel.workload.workload_hash] * len(cands))
    return ModelTrainer(model), X


def test_untrained_model_picks_nothing_and_a_trained_one_picks_its_first_ranked(kernels):
    from tuner.choose import model_pick
    from tuner.search.search import ModelTrainer

    kernel, space = _largest_kernel_space(kernels)
    with pytest.raises(ValueError, match="not trained"):
        model_pick(kernel, space, ModelTrainer())
    cands = [space.default()] + space.sample(8)
    latency = np.exp(np.random.default_rng(0).normal(size=len(cands)))  # the model learns these
    trainer, X = _trained_on(kernel, space, cands, latency)
    picked, seconds = model_pick(kernel, space, trainer, samples=8)
    again = space.feature_matrix([picked], kernel.workload)
    assert seconds == pytest.approx(float(trainer.predict(again)[0]))  # priced by the latency booster
    assert trainer.score(again)[0] >= trainer.score(X[:1])[0], "never ranked below the default it could pick"


def test_the_model_picks_a_gemm_schedule_among_its_seeds(kernels):
    """A GEMM's schedule is chosen among its register-blocked seeds (and the default), never
    a sampled one: even a model that learnt sampled schedules are fast picks a seed."""
    from tuner.choose import model_pick

    kernel, space = _largest_kernel_space(kernels)
    seeds = space.seeds()
    assert seeds, "the largest kernel of the layer is a GEMM with seeds"
    cands = [space.default(), *seeds, *space.sample(8)]
    latency = np.array([1e-3] + [1e-4] * len(seeds) + [1e-5] * (len(cands) - 1 - len(seeds)))
    trainer, _ = _trained_on(kernel, space, cands, latency)
    picked, _ = model_pick(kernel, space, trainer, samples=8)
    assert picked.record.candidate_hash in {s.record.candidate_hash for s in seeds}


@pytest.mark.parametrize("fused", ["silu_mul_dense", "rms_norm_dense"])
def test_epilogue_with_two_producers_gets_an_unfused_tiling_space(fused):
    """The fused GEMM kernels TVM's default rules cannot tile are sampled without epilogue fusion, and compute the
    same."""
    from tvm import te

    from extract.ops.kernels import rms_norm_dense_te, silu_mul_dense_te

    x, w, w2, g = (te.placeholder(s, name=n) for s, n in [((8, 64), "x"), ((32, 64), "w"), ((32, 64), "w2"),
                                                           ((64,), "g")])
    if fused == "silu_mul_dense":
        args = [x, w, w2, silu_mul_dense_te(x, w, w2)]
    else:
        args = [x, g, w, rms_norm_dense_te(x, g, w, 1e-6)]
    target = make_target({"kind": "llvm", "num-cores": 2})
    space = ScheduleSpace(te.create_prim_func(args), "f" * 64, target)
    sampled = space.sample(4)
    assert space.space_error is None and "without epilogue fusion" in space.space_note
    assert len(sampled) >= 2
    expected = _run_on_cpu(space.default().mod, target)
    for cand in sampled[:2]:
        np.testing.assert_allclose(_run_on_cpu(space.replay(cand.record).mod, target), expected, rtol=1e-4, atol=1e-4)


def _run_on_cpu(mod, target) -> np.ndarray:
    """Build ``mod`` (its ``main`` writes its last argument) and run it on fixed random inputs; the output."""
    import tvm

    from measure.tvmapi import ArgInfo

    shapes = [[int(d) for d in info.shape] for info in ArgInfo.from_prim_func(mod["main"])]
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.standard_normal(s).astype("float32")) for s in shapes[:-1]]
    out = tvm.runtime.tensor(np.zeros(shapes[-1], "float32"))
    tvm.compile(mod, target)["main"](*args, out)
    return out.numpy()


def test_mutants_are_new_replayable_schedules_that_compute_the_same(kernels):
    kernel = max(kernels, key=lambda k: k.workload.flops)
    target = make_target({"kind": "llvm", "num-cores": 2})
    space = ScheduleSpace(kernel.func, kernel.workload.workload_hash, target)
    parents = space.sample(2)
    mutants = space.mutate(parents + [space.default()], 6)
    assert len(mutants) >= 3
    hashes = {c.record.candidate_hash for c in mutants}
    assert len(hashes) == len(mutants) and not hashes & {p.record.candidate_hash for p in parents}
    assert space.mutate([space.default()], 4) == [], "the untuned default has no decision to mutate"
    expected = _run_on_cpu(space.default().mod, target)
    for cand in mutants[:2]:
        assert space.replay(cand.record).mod.script() == cand.mod.script()
        np.testing.assert_allclose(_run_on_cpu(cand.mod, target), expected, rtol=1e-4, atol=1e-4)


def test_progress_says_why_a_search_stopped_early_only_when_it_measured_something(capsys):
    from tuner.progress import Progress

    progress = Progress()
    progress.start_tuning(16)
    progress.kernel_done("3f2a1c9d dense", "space_exhausted", None, 5, 3)
    first = capsys.readouterr().err
    progress.kernel_done("3f2a1c9d dense", "space_exhausted", None, 0, 8)  # a resumed run
    resumed = capsys.readouterr().err
    progress.kernel_done("77aa0b12 dense", "space_exhausted", "no rule applies", 0, 8)
    no_space = capsys.readouterr().err
    assert "3f2a1c9d dense" in first and "every distinct schedule sampled was measured" in first
    assert resumed == ""
    assert "no schedule space: no rule applies" in no_space
    progress.kernel_done("5e0b4d21 dense", "budget_taken", None, 0, 8)  # other runs measure it
    assert "5e0b4d21 dense" in capsys.readouterr().err


@pytest.mark.slow
def test_prepared_weights_run_once_and_keep_the_outputs():
    """A merged candidate's weight concatenations, transposes and packs leave ``main``: its
    kernels are the per-run ones, and ``transform_weights`` then ``main`` give the
    original program's outputs."""
    import tvm
    from tvm import relax

    from extract.egraph import explore
    from extract.equivalence import run_module
    from extract.rules import PACK_BLOCK
    from tuner.compile import TRANSFORM_WEIGHTS, prepare_weights, prepared_inputs

    model = load_model("qwen3-tiny", stage="decode", kv_len=4)
    merged = next(c for c in explore(model.mod).candidates if c.strategy == "merge")
    prepared = prepare_weights(merged.mod)
    num_inputs = prepared_inputs(prepared)
    assert num_inputs == len(model.inputs) == prepared_inputs(lower_to_kernels(prepared))
    def concats(mod):
        return sum(k.calls for k in kernels_of(lower_to_kernels(mod)) if "concatenate" in k.name)

    # Q/K/V and gate/up weights are concatenated once; the KV cache's concats stay.
    assert concats(merged.mod) - concats(prepared) == 2

    vm = relax.VirtualMachine(relax.build(prepared, target="llvm"), tvm.cpu())
    weights = vm[TRANSFORM_WEIGHTS](*[tvm.runtime.tensor(w) for w in model.params])
    # the GEMM weights (merged Q/K/V, o, merged gate/up, down) are packed once, not per run
    assert [tuple(w.shape)[2:] for w in weights].count((PACK_BLOCK,)) == 4
    assert merged.mod["main"].script().count("R.permute_dims") - prepared["main"].script().count("R.permute_dims") == 4
    got = vm["main"](*[tvm.runtime.tensor(a) for a in model.inputs], *weights)
    expected = run_module(model.mod, [*model.inputs, *model.params])
    for out, ref in zip(got, expected, strict=True):
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-5)
    assert prepared_inputs(prepare_weights(model.mod)) == num_inputs  # the original's weight transposes too
    assert prepared_inputs(prepare_weights(_without_num_input(merged.mod))) is None  # all activations


def _without_num_input(mod):
    func = mod["main"].without_attr("num_input")
    new = mod.__class__(dict(mod.functions.items()), attrs=mod.attrs)
    new[mod.get_global_var("main")] = func
    return new


def test_a_slow_program_is_timed_fewer_times():
    from measure import MeasureConfig
    from tuner.compile import MIN_PROGRAM_REPEATS, program_repeats

    config = MeasureConfig(number=1, repeat=10, min_repeat_ms=100)
    assert program_repeats(config, 0.025) == 10  # a tuned layer: every repeat
    assert program_repeats(config, 10.0, budget_s=30.0) == 3  # an untuned layer: as many as fit
    assert program_repeats(config, 100.0, budget_s=30.0) == MIN_PROGRAM_REPEATS  # never fewer
    assert program_repeats(MeasureConfig(number=1, repeat=2), 100.0) == 2  # never more than asked
    assert program_repeats(MeasureConfig(number=4, repeat=10), 1.0, budget_s=30.0) == 7  # calls, not repeats
    # repeats long only because min_repeat_ms asks it are kept: the user asked for them
    assert program_repeats(MeasureConfig(number=1, repeat=1000, min_repeat_ms=100), 0.001) == 1000


def test_a_stored_workload_is_tuned_on_its_stored_kernel_whose_traces_name_its_blocks(tmp_path):
    """Two programs sharing a kernel whose blocks they name differently (the names come from each program's
    variables): one workload, and a trace recorded on the first replays in the second run."""
    from tvm import relax, te

    from database import open_database
    from tuner.session import TuneRun

    def dense(x, w, name):
        k = te.reduce_axis((0, 64), name="k")
        return te.compute((4, 32), lambda i, j: te.sum(x[i, k] * w[j, k], axis=k), name=name)

    def kernel(name):
        bb = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType((4, 64), "float32"))
        w = relax.Var("w", relax.TensorType((32, 64), "float32"))
        with bb.function("main", [x, w]):
            with bb.dataflow():
                out = bb.emit_output(bb.emit_te(dense, x, w, name))
            bb.emit_func_output(out)
        (k,) = kernels_of(lower_to_kernels(bb.get()))
        return k

    first, second = kernel("lv11_dense"), kernel("lv9_dense")
    assert first.workload.workload_hash == second.workload.workload_hash
    target = make_target({"kind": "llvm", "num-cores": 2})
    sampled = ScheduleSpace(first.func, first.workload.workload_hash, target).sample(1)[0]
    db = open_database(f"sqlite:///{tmp_path}/t.db")
    try:
        TuneRun._workloads(db, [(None, None, [first])], {})
        (again,) = TuneRun._workloads(db, [(None, None, [second])], {}).values()
    finally:
        db.close()
    assert "lv11_dense" in again.func.script()
    ScheduleSpace(again.func, again.workload.workload_hash, target).replay(sampled.record)
    with pytest.raises(Exception, match="lv11_dense"):  # what happened before: the run's own kernel
        ScheduleSpace(second.func, second.workload.workload_hash, target).replay(sampled.record)

"""The e-graph on one tiny Qwen3 decoder layer (prefill and decode shapes).

Translation, every rewrite family firing, saturation limits, distinct candidates that
all compute what the original computes, and extraction steered by node costs.
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import tvm
from egglog.deconstruct import get_literal_value
from tvm import relax

from extract import load_model
from extract.egraph import Exploration, explore
from extract.equivalence import CandidateMismatch, check_equivalent, run_module
from extract.exact import extract_exact
from extract.extraction import STRATEGIES, LatencyCostModel
from extract.lang import node_args, node_name, subterms
from extract.lowering import lower
from extract.rules import FAMILIES
from extract.saturate import ProgramEGraph, SaturationLimits, saturate
from measure.tvmapi import PrimFunc, structural_equal

STAGES = ("prefill", "decode")
LENGTHS = {"prefill": (16, 16), "decode": (1, 15)}
"""(tokens, cached tokens) per stage (prefill has no cache; decode's token is the 16th key): attention
over 16 keys, a whole block of packed keys."""


@pytest.fixture(scope="module", params=STAGES)
def model(request):
    seq_len, kv_len = LENGTHS[request.param]
    return load_model("qwen3-tiny", stage=request.param, seq_len=seq_len, kv_len=kv_len)


@pytest.fixture(scope="module")
def exploration(model) -> Exploration:
    return explore(model.mod)


def inputs(model) -> list[np.ndarray]:
    return [*model.inputs, *model.params]


def counts(term) -> Counter:
    """Constructor counts of a term; merged GEMM parts are counted by weights merged."""
    found: Counter = Counter()
    for sub in subterms(term):
        name = node_name(sub)
        if name in ("merged_dense", "merged_dense_packed"):
            name = f"{name}/{len(node_args(node_args(node_args(sub)[1])[0]))}"
        elif name == "permute_dims" and node_name(node_args(sub)[0]) == "Tensor.var":
            name = "permute_dims(weight)"
        found[name] += 1
    return found


def term_of(exploration: Exploration, strategy: str):
    model = LatencyCostModel(exploration.state, None, STRATEGIES[strategy])
    return exploration.state.egraph.extract(exploration.state.root, cost_model=model)


# -- translation ----------------------------------------------------------------------


def test_translation_shares_identical_subterms(model):
    state = ProgramEGraph.from_module(model.mod)
    matmuls = [t for t in subterms(state.root) if node_name(t) == "matmul"]
    # q/k/v read one hash-consed reshape of the normed input, gate/up another.
    xs = Counter(node_args(m)[0].__egg_typed_expr__ for m in matmuls)
    assert sorted(xs.values(), reverse=True)[:2] == [3, 2]
    relax_reshapes = sum(
        1
        for block in model.mod["main"].body.blocks
        for b in block.bindings
        if isinstance(b.value, relax.Call) and b.value.op.name == "relax.reshape"
    )
    # Three of them are one node, and the reshapes of K's and V's head repeat are
    # part of a ``repeat_heads`` node each.
    assert sum(1 for t in subterms(state.root) if node_name(t) == "reshape") == relax_reshapes - 5


def test_translation_recognises_rotate_half(model):
    """Q's and K's rotary embeddings rotate half their head dimension: one node each, and
    no ``negative`` (nor the slices it negates) is left."""
    state = ProgramEGraph.from_module(model.mod)
    found = counts(state.root)
    opaque_ops = {
        get_literal_value(node_args(t)[0]) for t in subterms(state.root) if node_name(t) == "Tensor.opaque"
    }
    assert found["rotate_half"] == 2 and not opaque_ops & {"relax.negative", "relax.strided_slice"}


def _half_turn(kind: str) -> tvm.IRModule:
    """``concat([-x[..., 4:], x[..., :4]], -1)`` on ``x [2, 8]``, or a variant that is not
    ``rotate_half``: ``"swapped"`` negates the lower half, ``"other_x"`` slices the lower
    half of another tensor, ``"axis0"`` slices and concatenates the first axis of ``[8, 8]``."""
    rows = 8 if kind == "axis0" else 2
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((rows, 8), "float32"))
    y = relax.Var("y", relax.TensorType((rows, 8), "float32"))
    axis = 0 if kind == "axis0" else 1
    size = rows if axis == 0 else 8
    with bb.function("main", [x, y]):
        with bb.dataflow():
            upper = bb.emit(relax.op.strided_slice(x, axes=[axis], begin=[size // 2], end=[size]))
            lower = bb.emit(relax.op.strided_slice(y if kind == "other_x" else x, axes=[axis], begin=[0],
                                                   end=[size // 2]))
            if kind == "swapped":
                parts = [upper, bb.emit(relax.op.negative(lower))]
            else:
                parts = [bb.emit(relax.op.negative(upper)), lower]
            gv = bb.emit_output(relax.op.concat(parts, axis=axis))
        bb.emit_func_output(gv)
    return bb.finalize()


@pytest.mark.parametrize(("kind", "recognised"),
                         [("rotate_half", True), ("swapped", False), ("other_x", False), ("axis0", False)])
def test_translation_recognises_rotate_half_only_where_it_is(kind, recognised):
    mod = _half_turn(kind)
    state = ProgramEGraph.from_module(mod)
    assert (counts(state.root)["rotate_half"] == 1) == recognised
    rng = np.random.default_rng(0)
    args = [rng.standard_normal([int(n) for n in p.ty.shape]).astype("float32") for p in mod["main"].params]
    if recognised:  # and it lowers back to what it computed
        x = args[0]
        np.testing.assert_array_equal(run_module(lower(state.root, state.translation), args)[0],
                                      np.concatenate([-x[:, 4:], x[:, :4]], 1))


def test_translation_recognises_the_head_repeat(model):
    """K and V are repeated for grouped-query attention (4 heads over 2): one node each,
    and no ``broadcast_to`` to a tensor's own shape is left."""
    state = ProgramEGraph.from_module(model.mod)
    repeats = [t for t in subterms(state.root) if node_name(t) == "repeat_heads"]
    assert sorted(get_literal_value(node_args(t)[1]) for t in repeats) == [2, 2]
    opaque_ops = {
        get_literal_value(node_args(t)[0]) for t in subterms(state.root) if node_name(t) == "Tensor.opaque"
    }
    assert "relax.broadcast_to" not in opaque_ops


# -- each rewrite fires on the layer --------------------------------------------------


def test_every_ruleset_fires(exploration):
    report = exploration.report
    assert report.stop_reason == "saturated"
    assert set(report.rules_fired) == set(FAMILIES)
    fired = dict(report.rules_fired)
    assert fired.pop("epilogue_bias") == 0  # Qwen3's projections have no bias
    assert all(n > 0 for n in fired.values()), report.rules_fired


# strategy -> constructor counts expected in the term it extracts
EXPECTED = {
    "none": {"matmul": 9, "permute_dims(weight)": 7, "dense": 0, "merged_dense/3": 0},
    "transpose_fold": {"matmul": 2, "permute_dims(weight)": 0, "dense": 7, "repeat_heads": 2,
                       "softmax_last": 1, "fast_softmax_last": 0},
    # merged GEMMs, every GEMM on a weight packed and the scores on packed keys (the default
    # costs prefer packed)
    "merge": {"dense": 0, "dense_packed": 2, "merged_dense_packed/3": 3, "merged_dense_packed/2": 2,
              "merged_dense/3": 0, "concat": 2, "gqa_scores_packed": 1, "softmax_last": 0,
              "fast_softmax_last": 1, "fast_silu": 1},
    "epilogue": {"dense": 3, "silu_mul_dense": 1, "dense_add": 2, "silu": 0, "merged_dense/3": 0,
                 "fast_softmax_last": 1, "fast_silu": 0},
    # the default costs prefer the input norm as prologue of V, and the per-head norm and
    # rotary embedding as epilogue of Q and K, to merging them
    "all": {"rms_norm_dense": 1, "rotary_norm_dense": 2, "rotary": 0, "merged_dense/3": 0, "silu_mul_dense": 1,
            "dense_add": 2, "dense": 0, "matmul": 0, "gqa_scores": 0, "gqa_scores_packed": 0, "gqa_context": 0,
            "repeat_heads": 0, "fast_softmax_last": 0, "fast_attention": 1},
    # the merges with attention as one kernel
    "attention": {"merged_dense_packed/3": 3, "merged_dense_packed/2": 2, "gqa_scores_packed": 0,
                  "gqa_context": 0, "softmax_last": 0, "fast_softmax_last": 0, "attention": 0,
                  "fast_attention": 1, "fast_silu": 1},
    "prologue": {"rms_norm_dense": 5, "dense": 2, "rms_norm": 2, "silu_mul_dense": 0, "fast_silu": 1},
}


@pytest.mark.parametrize("strategy", list(EXPECTED))
def test_strategy_extracts_the_expected_rewrites(exploration, strategy):
    found = counts(term_of(exploration, strategy))
    assert {k: found[k] for k in EXPECTED[strategy]} == EXPECTED[strategy]


# -- saturation limits ----------------------------------------------------------------

LIMITS = [
    (SaturationLimits(), "saturated"),
    (SaturationLimits(max_enodes=10), "node_limit"),
    (SaturationLimits(max_iterations=1), "iteration_limit"),
    (SaturationLimits(max_seconds=0.0), "time_limit"),
]


@pytest.mark.parametrize(("limits", "reason"), LIMITS, ids=[r for _, r in LIMITS])
def test_saturation_reports_its_stop_reason(model, limits, reason):
    state = ProgramEGraph.from_module(model.mod)
    start = state.enodes()
    report = saturate(state, limits)
    assert report.stop_reason == reason
    assert report.enodes == state.enodes() >= start
    assert 0 < report.eclasses <= report.enodes
    assert report.iterations <= limits.max_iterations
    if reason == "saturated":
        assert report.iterations >= 2 and report.enodes > start
    if reason in ("node_limit", "time_limit"):
        assert report.iterations == 0 and report.enodes == start


# -- candidates -----------------------------------------------------------------------


@pytest.mark.slow
def test_candidates_are_distinct_and_match_the_original(model, exploration):
    candidates = exploration.candidates
    assert len(candidates) == 4
    assert candidates[0].strategy == "original" and candidates[0].rewrites == ()
    assert candidates[0].term_text == str(exploration.state.root)
    assert len({c.term_hash for c in candidates}) == len(candidates)
    assert len({c.rewrites for c in candidates}) == len(candidates)
    for c in candidates:
        assert check_equivalent(model.mod, c.mod, inputs(model)) <= 1e-4, c.strategy


@pytest.mark.slow
def test_round_trip_keeps_the_signature(model, exploration):
    original, rebuilt = model.mod["main"], exploration.candidates[0].mod["main"]
    assert [p.name for p in rebuilt.params] == [p.name for p in original.params]
    for p, q in zip(rebuilt.params, original.params, strict=True):
        assert structural_equal(p.ty, q.ty)
    assert structural_equal(rebuilt.ret_ty, original.ret_ty)
    assert int(rebuilt.attrs["num_input"]) == int(original.attrs["num_input"])
    ours = check_equivalent(model.mod, exploration.candidates[0].mod, inputs(model), rtol=0, atol=0)
    assert ours == 0.0
    reference = model.reference_outputs()
    if reference is not None:  # and it is what PyTorch computes
        for got, want in zip(
            run_module(exploration.candidates[0].mod, inputs(model)), reference, strict=True
        ):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _kernel_names(mod) -> Counter:
    return Counter(
        str(gv.name_hint).rstrip("0123456789")
        for gv, f in mod.functions_items()
        if isinstance(f, PrimFunc)
    )


def test_rewritten_kernels_read_weights_in_place(exploration):
    by_strategy = {c.strategy: c.mod for c in exploration.candidates}
    text = by_strategy["all"]["main"].script()
    # No transpose of a weight is left, and each fused node is one kernel.
    assert "permute_dims(p_" not in text
    kernels = _kernel_names(by_strategy["all"])
    assert kernels["silu_mul_dense"] == 1 and kernels["dense_add"] >= 1
    assert kernels["rms_norm_dense"] == 1  # V
    assert kernels["rotary_norm_dense"] == 2  # Q and K, with their per-head norms and rotary embedding
    merged = by_strategy["merge"]["main"].script()
    assert "R.split(" in merged and "R.concat((p_" in merged


def _toy(op) -> tvm.IRModule:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 8), "float32"))
    y = relax.Var("y", relax.TensorType((4, 8), "float32"))
    with bb.function("main", [x, y]):
        with bb.dataflow():
            gv = bb.emit_output(op(x, y))
        bb.emit_func_output(gv)
    return bb.finalize()


def test_a_wrong_candidate_is_caught():
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((4, 8)).astype("float32") for _ in range(2)]
    original = _toy(relax.op.add)
    assert check_equivalent(original, _toy(lambda a, b: relax.op.add(b, a)), args) == 0.0
    with pytest.raises(CandidateMismatch, match=r"output 0 differs: max abs error \S+ \(rtol"):
        check_equivalent(original, _toy(relax.op.subtract), args)


def test_a_float16_output_may_round_one_unit_the_other_way():
    # 1 + 2**-11 lies halfway between two float16 values: the original rounds it to 1 (to even),
    # a candidate that adds 2**-20 on the way rounds it up, one unit in the last place (2**-10)
    args = [np.full((4, 8), 1 + 2.0**-11, "float32"), np.zeros((4, 8), "float32")]
    original = _toy(lambda a, b: relax.op.astype(relax.op.add(a, b), "float16"))
    nudged = _toy(lambda a, b: relax.op.astype(relax.op.add(relax.op.add(a, b), relax.const(2.0**-20)), "float16"))
    assert check_equivalent(original, nudged, args) == 2.0**-10
    wrong = _toy(lambda a, b: relax.op.astype(relax.op.multiply(a, relax.const(1.01)), "float16"))
    with pytest.raises(CandidateMismatch, match="output 0 differs"):
        check_equivalent(original, wrong, args)


# -- node costs steer extraction ------------------------------------------------------


def _priced(expensive: set[str]):
    def node_cost(op_name, out_shape, dtype, arg_shapes):
        return 1.0 if op_name in expensive else None

    return node_cost


FUSED_NORMS = {"rms_norm_dense", "rotary_dense", "rotary_norm_dense"}
STEERING = [
    (set(), {"rms_norm_dense": 1, "rotary_norm_dense": 2, "merged_dense/3": 0, "silu_mul_dense": 1,
             "dense_add": 2}),
    ({"rotary_norm_dense"}, {"rms_norm_dense": 3, "rotary_norm_dense": 0, "rotary": 2}),
    (FUSED_NORMS, {"rms_norm_dense": 0, "merged_dense_packed/3": 3, "silu_mul_dense": 1}),
    (
        {"merged_dense", "merged_dense_packed", *FUSED_NORMS},
        {"merged_dense_packed/3": 0, "merged_dense_packed/2": 0, "dense_packed": 3, "silu_mul_dense": 1},
    ),
    (
        {"dense_packed", "merged_dense_packed", "merged_dense", *FUSED_NORMS},
        {"merged_dense/3": 0, "merged_dense_packed/3": 0, "dense": 3, "silu_mul_dense": 1},
    ),
    (
        {"silu_mul_dense", "dense_add", *FUSED_NORMS},
        {"silu_mul_dense": 0, "dense_add": 0, "merged_dense_packed/3": 3, "merged_dense_packed/2": 2},
    ),
    (
        {"dense", "merged_dense", "dense_packed", "merged_dense_packed", "silu_mul_dense", "dense_add",
         *FUSED_NORMS, "gqa_scores", "gqa_scores_packed", "gqa_context", "attention", "fast_attention"},
        {"dense": 0, "matmul": 9, "merged_dense/3": 0},
    ),
]


@pytest.mark.parametrize(
    ("expensive", "expected"),
    STEERING,
    ids=["default", "rotary", "prologue", "merges", "packing", "fusions", "all"],
)
def test_node_cost_steers_extract_best(exploration, expensive, expected):
    best = exploration.extract_best(_priced(expensive))
    assert best.strategy == "best" and best.cost is not None
    found = counts(best.term)
    assert {k: found[k] for k in expected} == expected


@pytest.mark.slow
@pytest.mark.parametrize("expensive", [set(), FUSED_NORMS], ids=["default", "prologue"])
def test_exact_extraction_is_never_worse_than_greedy(model, exploration, expensive):
    greedy = exploration.extract_best(_priced(expensive))
    exact = extract_exact(exploration.state, _priced(expensive), time_limit_s=30.0)
    assert exact.optimal and exact.candidate.strategy == "exact"
    # within a tenth of a nanosecond: HiGHS may keep a part of an already paid merged GEMM
    # (an EPSILON_S tie-breaker, below its tolerances) that the read-back term does not use
    assert exact.objective_s == pytest.approx(exact.candidate.cost, rel=1e-9, abs=1e-10)
    assert exact.candidate.cost <= greedy.cost + 1e-9  # ties within a nanosecond
    if not expensive:  # shared subterms: the input norm computed once for Q, K and V beats a prologue on V
        assert exact.candidate.cost < greedy.cost
        assert counts(greedy.term)["rms_norm_dense"] == 1
        assert {k: counts(exact.candidate.term)[k] for k in ("rms_norm_dense", "rotary_norm_dense", "rms_norm")} == {
            "rms_norm_dense": 0, "rotary_norm_dense": 2, "rms_norm": 2}
        assert check_equivalent(model.mod, exact.candidate.mod, inputs(model)) <= 1e-4


def test_exact_extraction_pays_a_merged_gemm_whole_for_one_part(exploration):
    """Q and K fused with their rotary embedding leave V alone: its part of a merged Q/K/V
    GEMM (a quarter of the rows here) would still compute the whole GEMM, 1 s, so a plain
    packed GEMM at 0.5 s is cheaper."""
    def node_cost(op_name, out_shape, dtype, arg_shapes):
        if op_name in ("merged_dense", "merged_dense_packed", "dense", "matmul", "rms_norm_dense"):
            return 1.0
        return {"dense_packed": 0.5, "rotary_norm_dense": 1e-9}.get(op_name)

    exact = extract_exact(exploration.state, node_cost, time_limit_s=30.0)
    found = counts(exact.candidate.term)
    assert found["rotary_norm_dense"] == 2 and found["merged_dense_packed/3"] == 0
    assert found["dense_packed"] >= 1 and exact.objective_s < 1.0


def test_exact_extraction_finds_the_root_beside_dead_code():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 8), "float32"))
    w = relax.Var("w", relax.TensorType((6, 8), "float32"))
    with bb.function("main", [x, w], attrs={"num_input": 1}):
        with bb.dataflow():
            bb.emit(relax.op.add(x, x))  # unused: an e-class no e-node uses
            gv = bb.emit_output(relax.op.matmul(x, relax.op.permute_dims(w, [1, 0])))
        bb.emit_func_output(gv)
    mod = bb.finalize()
    exploration = explore(mod, max_candidates=1)
    exact = extract_exact(exploration.state)
    assert counts(exact.candidate.term)["dense"] == 1
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((4, 8)).astype("float32"), rng.standard_normal((6, 8)).astype("float32")]
    assert check_equivalent(mod, exact.candidate.mod, args) <= 1e-5


@pytest.mark.slow
def test_identical_layers_are_priced_once():
    asked = []

    def node_cost(op_name, out_shape, dtype, arg_shapes):
        asked.append(op_name)
        return None

    counts_by_layers = {}
    for layers in (1, 2):
        state = ProgramEGraph.from_module(load_model("qwen3-tiny", "decode", layers=layers, kv_len=4).mod)
        saturate(state)
        asked.clear()
        model = LatencyCostModel(state, node_cost)
        state.egraph.extract(state.root, cost_model=model)
        counts_by_layers[layers] = (model.calls, len(asked), state.enodes())
    (one, asked_one, nodes_one), (two, asked_two, nodes_two) = counts_by_layers.values()
    assert nodes_two > 1.5 * nodes_one  # about twice the e-graph (372 / 203)...
    assert two == asked_two and one == asked_one
    assert two <= one + 4  # ...priced about once (the second layer's cache shapes differ a bit)


def test_saturation_can_run_some_families_only(model):
    state = ProgramEGraph.from_module(model.mod)
    report = saturate(state, SaturationLimits(families=("transpose_fold",)))
    assert report.stop_reason == "saturated"
    assert (
        list(report.rules_fired) == ["transpose_fold"] and report.rules_fired["transpose_fold"] == 7
    )
    with pytest.raises(ValueError, match="unknown rewrite families"):
        SaturationLimits(families=("no_such_family",))


@pytest.mark.slow
def test_biased_projections_fuse_and_merge():
    """Qwen2.5's Q/K/V biases: bias epilogues and biased merges, each numerically checked."""
    model = load_model("qwen2.5-tiny", stage="prefill", seq_len=4)
    exploration = explore(model.mod, max_candidates=len(STRATEGIES) + 1)
    fired = exploration.report.rules_fired
    assert fired["epilogue_bias"] == 3 and fired["merge_qkv"] == 2  # with and without bias
    by_strategy = {c.strategy: c for c in exploration.candidates}
    assert counts(by_strategy["epilogue"].term)["dense_bias"] == 3
    merged = counts(exploration.extract_best(_priced({"rms_norm_dense"})).term)
    assert merged["merged_dense_bias"] == 3 and merged["dense_bias"] == 0
    for strategy in ("epilogue", "all", "prologue"):
        candidate = by_strategy[strategy]
        assert check_equivalent(model.mod, candidate.mod, inputs(model)) <= 1e-4, strategy
    assert "dense_bias" in _kernel_names(by_strategy["epilogue"].mod)


@pytest.mark.parametrize("group", [1, 2, 4])
def test_gqa_kernels_match_repeated_heads(group):
    """``gqa_scores`` and ``gqa_context`` compute ``q @ repeat(k)^T`` and ``p @ repeat(v)``
    (numpy's ``repeat`` on the head axis: head ``h`` reads K/V head ``h // group``)."""
    from extract.ops.kernels import gqa_context_te, gqa_scores_te

    rng = np.random.default_rng(group)
    kv_heads, seq, keys, depth = 2, 3, 7, 8
    q = rng.standard_normal((1, kv_heads * group, seq, depth)).astype("float32")
    k, v = (rng.standard_normal((1, kv_heads, keys, depth)).astype("float32") for _ in range(2))
    p = rng.standard_normal((1, kv_heads * group, seq, keys)).astype("float32")
    bb = relax.BlockBuilder()
    params = [relax.Var(n, relax.TensorType(a.shape, "float32")) for n, a in zip("qkvp", (q, k, v, p))]
    with bb.function("main", params):
        with bb.dataflow():
            scores = bb.emit_te(gqa_scores_te, params[0], params[1])
            context = bb.emit_te(gqa_context_te, params[3], params[2])
            gv = bb.emit_output(relax.Tuple([scores, context]))
        bb.emit_func_output(gv)
    got_scores, got_context = run_module(bb.finalize(), [q, k, v, p])
    np.testing.assert_allclose(got_scores, q @ np.repeat(k, group, axis=1).transpose(0, 1, 3, 2), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_context, p @ np.repeat(v, group, axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("group", [1, 2])
def test_scores_from_packed_keys_match_repeated_heads(group):
    """``gqa_scores_packed`` packs the keys into ``[B, KV, L / b, D, b]`` in its kernel and
    computes ``q @ repeat(k)^T``."""
    from extract.ops.kernels import gqa_scores_packed_te
    from extract.rules import PACK_BLOCK

    rng = np.random.default_rng(group)
    q = rng.standard_normal((1, 2 * group, 3, 8)).astype("float32")
    k = rng.standard_normal((1, 2, 3 * PACK_BLOCK, 8)).astype("float32")
    bb = relax.BlockBuilder()
    params = [relax.Var(n, relax.TensorType(a.shape, "float32")) for n, a in zip("qk", (q, k))]
    with bb.function("main", params):
        with bb.dataflow():
            gv = bb.emit_output(bb.emit_te(lambda a, b: gqa_scores_packed_te(a, b, PACK_BLOCK), *params))
        bb.emit_func_output(gv)
    (got,) = run_module(bb.finalize(), [q, k])
    np.testing.assert_allclose(got, q @ np.repeat(k, group, axis=1).transpose(0, 1, 3, 2), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("x_shape", [(1, 64), (1, 3, 64)])
def test_packed_dense_matches_the_stored_layout(x_shape):
    """``dense_packed`` on ``W`` packed into ``[N / b, K, b]`` (by the lowering's own reshape
    and transpose) computes ``x @ W^T``."""
    from extract.ops.kernels import dense_packed_te
    from extract.rules import PACK_BLOCK

    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape).astype("float32")
    w = rng.standard_normal((3 * PACK_BLOCK, 64)).astype("float32")
    bb = relax.BlockBuilder()
    xv = relax.Var("x", relax.TensorType(x.shape, "float32"))
    wv = relax.Var("w", relax.TensorType(w.shape, "float32"))
    with bb.function("main", [xv, wv]):
        with bb.dataflow():
            blocks = bb.emit(relax.op.reshape(wv, [3, PACK_BLOCK, 64]))
            packed = bb.emit(relax.op.permute_dims(blocks, [0, 2, 1]))
            gv = bb.emit_output(bb.emit_te(dense_packed_te, xv, packed))
        bb.emit_func_output(gv)
    (got,) = run_module(bb.finalize(), [x, w])
    np.testing.assert_allclose(got, x @ w.T, rtol=1e-5, atol=1e-5)


def _run_te(fn, x: np.ndarray) -> np.ndarray:
    bb = relax.BlockBuilder()
    xv = relax.Var("x", relax.TensorType(x.shape, "float32"))
    with bb.function("main", [xv]):
        with bb.dataflow():
            gv = bb.emit_output(bb.emit_te(fn, xv))
        bb.emit_func_output(gv)
    (got,) = run_module(bb.finalize(), [x])
    return got


def test_fast_exp_kernels_match_exact_softmax_and_silu():
    """``fast_softmax_last`` and ``fast_silu`` agree with the exact functions to float32
    rounding, also for masked scores (float32's lowest) and inputs past exp's range."""
    from extract.ops.kernels import fast_silu_te, fast_softmax_te

    rng = np.random.default_rng(0)
    x = (4 * rng.standard_normal((2, 4, 3, 40))).astype("float32")
    x[..., -5:] = np.finfo("float32").min  # a causal mask's masked keys
    x[0, 0, 0, :3] = (-200.0, 95.0, 120.0)
    shifted = np.exp((x - x.max(-1, keepdims=True)).astype("float64"))
    np.testing.assert_allclose(_run_te(fast_softmax_te, x), shifted / shifted.sum(-1, keepdims=True),
                               rtol=1e-5, atol=1e-6)
    y = np.clip(x, -300.0, 300.0)
    silu = y.astype("float64") / (1.0 + np.exp(-y.astype("float64")))
    np.testing.assert_allclose(_run_te(fast_silu_te, y), silu, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_a_cast_after_a_gemm_runs_in_the_gemm_kernel():
    """A cast epilogue (a float32 GEMM stored as float16, with a bias) is one kernel in every candidate.

    The cast stays an opaque node in the e-graph: after extraction, TVM's fusion puts an
    elementwise consumer of a GEMM's output into the GEMM's kernel (as the scheduled
    seeds fuse it into the tile's write), whichever GEMM form was extracted.
    """
    from tuner.compile import prepare_weights
    from tuner.kernels import kernels_of, lower_to_kernels

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 32), "float32"))
    w = relax.Var("w", relax.TensorType((64, 32), "float32"))
    b = relax.Var("b", relax.TensorType((64,), "float32"))
    with bb.function("main", [x, w, b], attrs={"num_input": 1}):
        with bb.dataflow():
            y = bb.emit(relax.op.add(relax.op.matmul(x, relax.op.permute_dims(w, [1, 0])), b))
            gv = bb.emit_output(relax.op.astype(y, "float16"))
        bb.emit_func_output(gv)
    mod = bb.finalize()
    exploration = explore(mod, max_candidates=len(STRATEGIES) + 1)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype("float32") for s in ((4, 32), (64, 32), (64,))]
    forms = set()
    for cand in exploration.candidates:
        check_equivalent(mod, cand.mod, args)  # float16 outputs: within two of its epsilons
        (kernel,) = kernels_of(lower_to_kernels(prepare_weights(cand.mod)))
        assert kernel.workload.op_kind == "matmul"
        assert json.loads(kernel.workload.shapes_json)[-1]["dtype"] == "float16"  # its output
        forms.add(kernel.name.rstrip("0123456789"))
    assert len(forms) >= 2, forms  # the GEMM forms differ (plain, bias epilogue, packed), each with the cast

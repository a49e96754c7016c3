"""Identical layers explored once: the split, the report, and candidates that stay exact.

A two-layer tiny Qwen3 (prefill and decode) and a synthetic three-layer program whose
last layer differs.  Every candidate is checked numerically against the original, and
each distinct layer's choice must show up once per layer it computes.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest
import tvm
from tvm import relax

from extract import load_model
from extract.egraph import explore
from extract.equivalence import check_equivalent
from extract.lang import node_name, subterms
from extract.layers import split_layers

LAYERS = 2


@pytest.fixture(scope="module", params=("prefill", "decode"))
def model(request):
    return load_model("qwen3-tiny", stage=request.param, seq_len=8, kv_len=16, layers=LAYERS)


@pytest.fixture(scope="module")
def exploration(model):
    return explore(model.mod)


def inputs(model) -> list[np.ndarray]:
    return [*model.inputs, *model.params]


def kernel_calls(mod: tvm.IRModule) -> Counter:
    """``call_tir`` calls in ``main`` by kernel name (digits dropped)."""
    return Counter(re.findall(r"R\.call_tir\(([a-z_]+?)\d*,", mod["main"].script()))


def test_identical_layers_are_split_and_grouped(model):
    split = split_layers(model.mod)
    assert split is not None
    assert len(split.layers) == LAYERS and len(split.groups) == 1
    assert split.groups[0].members == tuple(range(LAYERS))
    # Each layer reads its own weights; layer 1 starts from layer 0's hidden state.
    first, second = split.layers
    assert first.args[0].name == "hidden_states"
    assert second.args[0] in first.outputs
    weights = [{a.name for a in layer.args if a.name.startswith("p_layers_")} for layer in split.layers]
    assert all(name.startswith(f"p_layers_{i}_") for i, names in enumerate(weights) for name in names)
    assert len(weights[0]) == len(weights[1]) > 0


def test_report_says_how_many_layers_were_deduplicated(exploration):
    report = exploration.report
    assert (report.layers, report.distinct_layers, report.deduplicated_layers) == (LAYERS, 1, 1)
    assert report.stop_reason == "saturated"
    assert exploration.layered is not None and len(exploration.layered.states) == 1


@pytest.mark.slow
def test_candidates_match_the_original_and_apply_each_choice_to_every_layer(model, exploration):
    candidates = exploration.candidates
    assert len(candidates) == 4 and candidates[0].strategy == "original"
    assert len({c.term_hash for c in candidates}) == len(candidates)
    for c in candidates:
        assert check_equivalent(model.mod, c.mod, inputs(model)) <= 1e-4, c.strategy
        assert c.term is None and len(c.layer_terms) == 1
        assert c.term_text.startswith(f"layers {','.join(map(str, range(LAYERS)))}: ")
        # The one distinct layer's fused kernels appear once per layer in the program.
        per_layer = Counter(node_name(t) for t in subterms(c.layer_terms[0]))
        calls = kernel_calls(c.mod)
        for kernel in ("silu_mul_dense", "dense_add", "rms_norm_dense"):
            assert calls[kernel] == LAYERS * per_layer[kernel], (c.strategy, kernel)
    assert "epilogue_silu_mul" in {f for c in candidates for f in c.rewrites}


@pytest.mark.slow
def test_best_and_exact_extraction_of_deduplicated_layers(model, exploration):
    def node_cost(op_name, out_shape, dtype, arg_shapes):
        return 1.0 if op_name == "rms_norm_dense" else None

    best = exploration.extract_best(node_cost)
    exact = exploration.extract_best(node_cost, exact=True, time_limit_s=30.0)
    for candidate in (best, exact):
        assert candidate.cost is not None and candidate.cost > 0
        assert kernel_calls(candidate.mod)["rms_norm_dense"] == 0
        assert check_equivalent(model.mod, candidate.mod, inputs(model)) <= 1e-4
    assert exact.cost <= best.cost + 1e-9


@pytest.mark.slow
def test_one_layer_is_explored_as_one_term():
    exploration = explore(load_model("qwen3-tiny", stage="prefill", seq_len=8).mod)
    assert exploration.layered is None
    assert exploration.report.layers == exploration.report.deduplicated_layers == 0


def _stack(kinds: list[str]) -> tvm.IRModule:
    """Layers ``h = h + h @ W_i^T`` (``"add"``) or ``h = h * (h @ W_i^T)`` (``"mul"``)."""
    bb = relax.BlockBuilder()
    h = relax.Var("h", relax.TensorType((4, 8), "float32"))
    ws = [relax.Var(f"p_layers_{i}_w", relax.TensorType((8, 8), "float32")) for i in range(len(kinds))]
    with bb.function("main", [h, *ws], attrs={"num_input": 1}):
        with bb.dataflow():
            x, outs = h, []
            for w, kind in zip(ws, kinds, strict=True):
                y = bb.emit(relax.op.matmul(x, bb.emit(relax.op.permute_dims(w, [1, 0]))))
                x = bb.emit(relax.op.add(x, y) if kind == "add" else relax.op.multiply(x, y))
                outs.append(y)
            gv = bb.emit_output(relax.Tuple([x, *outs]))
        bb.emit_func_output(gv)
    return bb.finalize()


def test_a_different_layer_gets_its_own_group():
    mod = _stack(["add", "add", "mul"])
    split = split_layers(mod)
    assert split is not None and [g.members for g in split.groups] == [(0, 1), (2,)]
    exploration = explore(mod)
    assert exploration.report.deduplicated_layers == 1
    assert exploration.report.distinct_layers == 2
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(shape).astype("float32") for shape in [(4, 8)] + [(8, 8)] * 3]
    for c in exploration.candidates:
        assert check_equivalent(mod, c.mod, args) <= 1e-5, c.strategy
    best = exploration.extract_best()
    assert "transpose_fold" in best.rewrites
    assert kernel_calls(best.mod)["dense"] == 3  # every layer's transpose folded

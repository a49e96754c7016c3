"""Peers in processes of their own: each checked against the reference before it is timed.

A peer built from perturbed weights returns wrong numbers for real; it must be
reported as ``wrong result`` with its error and never timed, while a correct one
is timed. The layer is qwen3-tiny's decode (a KV cache as explicit inputs and outputs).
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch

from extract.frontend import check_model, torch_module
from tuner.contender import Contenders
from tuner.options import RunOptions, TuneError
from tuner.peers import LABELS, build_peer, installed, layer_peer
from tuner.report import peer_line
from tuner.session import RunSummary

LAYER = {"model": "qwen3-tiny", "stage": "decode", "seq_len": 4, "kv_len": 16, "layers": 1, "seed": 0}


def _module():
    source = check_model(LAYER["model"], LAYER["stage"], LAYER["seq_len"], LAYER["kv_len"], LAYER["layers"])
    return torch_module(source, stage=LAYER["stage"], seq_len=LAYER["seq_len"], kv_len=LAYER["kv_len"],
                        layers=LAYER["layers"], seed=LAYER["seed"])


def reference() -> tuple[np.ndarray, ...]:
    """The layer's outputs in PyTorch eager (the reference every peer must match)."""
    module, arrays = _module()
    first, *rest = arrays
    with torch.no_grad():
        out = module(torch.from_numpy(arrays[first]), **{k: torch.from_numpy(arrays[k]) for k in rest})
    return tuple(o.numpy().copy() for o in out)


def perturbed_peer(name: str, scale: float):
    """Peer ``name`` of the layer with its down projection's weight scaled by ``scale``: wrong numbers."""
    module, arrays = _module()
    with torch.no_grad():
        module.layers[0].mlp.down_proj.weight.mul_(scale)
    module.config._attn_implementation = "sdpa"
    return build_peer(name, module, arrays, threads=1)


def right_peer(name: str):
    return layer_peer(name, **LAYER, threads=1)


@pytest.mark.slow  # three processes that import torch, transformers and TVM: about 10 s each on 2 cores
def test_a_peer_with_wrong_numbers_or_no_build_is_reported_not_timed():
    builds = {"right": partial(right_peer, "torch_eager"), "wrong": partial(perturbed_peer, "torch_eager", 3.0),
              "broken": partial(right_peer, "no_such_peer")}
    with Contenders(builds, reference(), settle_s=0.0) as peers:
        peers.start()
        for _ in range(3):
            peers.time_round()
    right, wrong, broken = (peers.results[name] for name in builds)
    assert right.status == "ok" and len(right.times_s) == 3 and right.median_s > 0
    assert right.max_abs_error <= 1e-3
    assert wrong.status == "wrong result" and wrong.times_s == [] and wrong.median_s is None
    assert wrong.max_abs_error > 1e-3 and "differs from the reference" in wrong.error
    assert broken.status == "failed" and "no_such_peer" in broken.error and broken.median_s is None


@pytest.mark.slow
@pytest.mark.parametrize("name", ["torch_compile", "torch_compile_max_autotune", "onnxruntime"])
def test_compiled_peers_are_checked_then_timed(name):
    if not installed(name):
        pytest.fail(f"{name} is not installed: pip install -e .[test]")
    with Contenders({"right": partial(right_peer, name), "wrong": partial(perturbed_peer, name, 0.0)},
                    reference(), settle_s=0.0) as peers:
        peers.start()
        peers.time_round()
    right, wrong = peers.results["right"], peers.results["wrong"]
    assert right.status == "ok", right.error
    assert right.median_s > 0 and right.compile_s > 0
    assert wrong.status == "wrong result" and wrong.median_s is None


def test_an_unknown_peer_is_a_one_line_error():
    with pytest.raises(TuneError, match="unknown peer 'tvm_eager'"):
        RunOptions(model="qwen3-tiny", peers=("torch_compile", "tvm_eager"))


def test_the_summary_names_the_fastest_peer_and_each_one_not_timed():
    peers = [{"name": "torch_compile", "status": "ok", "median_s": 0.004, "repeats": 5, "compile_s": 9.0,
              "max_abs_error": 1e-6, "error": ""},
             {"name": "torch_compile_max_autotune", "status": "ok", "median_s": 0.003, "repeats": 5,
              "compile_s": 60.0, "max_abs_error": 1e-6, "error": ""},
             {"name": "onnxruntime", "status": "wrong result", "median_s": None, "repeats": 0, "compile_s": 2.0,
              "max_abs_error": 0.5, "error": "output 0 differs from the reference (max abs error 0.5)"}]
    latency = {"tuned": 0.002, "tvm_default": 0.01, "torch_eager": 0.005, "torch_compile": 0.004,
               "torch_compile_max_autotune": 0.003, "onnxruntime": None}
    summary = RunSummary(session_id=1, model="m", stage="decode", target="{}", kernels=[], latency_s=latency,
                         measured_trials=0, graph={}, saturation={}, artifact="", max_abs_error=0.0, peers=peers)
    line = peer_line(summary)
    assert line.startswith(f"fastest peer: {LABELS['torch_compile_max_autotune']} 3.000 ms (1.50x")
    assert f"{LABELS['onnxruntime']}: wrong result (output 0 differs" in line
    assert peer_line(RunSummary(**{**summary.__dict__, "peers": []})) is None  # --no-peers

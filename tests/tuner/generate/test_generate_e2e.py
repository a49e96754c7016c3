"""The whole model compiled and generating: greedy tokens as transformers', the artifact's checks, the CLI.

A checkpoint of a tiny config with three layers is written by save_pretrained,
compiled by `tune run --whole-model --weights DIR --trials 0` (every kernel with the
schedule the cost model picks), loaded, and compared with transformers'
`generate(do_sample=False)` on the same weights; TVM's default build is compared too.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from extract.config import read_config
from extract.decoder import ARCHITECTURES
from extract.frontend import CONFIG_DIR
from tuner.generate import load
from tuner.generate.build import build_artifact
from tuner.target import resolve_target

pytestmark = pytest.mark.slow  # compiles every program of a model at every bucket

MAX_LEN = 48
NEW_TOKENS = 32
TIE = 1e-4  # two logits this close are a tie: either token is a right greedy choice


def tune(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuner", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900)


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode != 0, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture(scope="module", params=["qwen3-tiny", "qwen2.5-tiny", "llama-tiny"])
def built(request, tmp_path_factory):
    """(reference transformers model, artifact directory) of a three-layer checkpoint of the config."""
    root = tmp_path_factory.mktemp(request.param)
    # a wide initializer spreads the logits, so that greedy choices are rarely near-ties
    data = dict(read_config(CONFIG_DIR / f"{request.param}.json"), num_hidden_layers=3, initializer_range=0.5)
    data.pop("layer_types", None)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(ARCHITECTURES[data["model_type"]][0](**data)).eval()
    checkpoint = root / "checkpoint"
    model.save_pretrained(checkpoint, max_shard_size="200KB")
    # --trials 0: nothing measured; on an empty database each kernel gets the shipped pretrained model's
    # pick, through the same choice and build as tuned kernels
    proc = tune("run", str(checkpoint / "config.json"), "--whole-model", "--weights", str(checkpoint),
                "--max-seq-len", str(MAX_LEN), "--trials", "0", "--db", f"sqlite:///{root}/t.db",
                "--artifact-dir", str(root / "artifacts"), "--json", "-q", cwd=root)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["buckets"] == [16, 32, 48] and summary["build"] == "tuned"
    schedules = summary["tuning"]["schedules"]
    assert summary["tuning"]["sessions"] and {s["source"] for s in schedules} <= {"measured", "predicted", "roofline"}
    assert any(s["source"] == "predicted" for s in schedules)  # the shipped model chose them
    assert any(len(s["shapes"]) > 1 for s in schedules)  # a kernel shared by several shapes is chosen once
    assert set(summary["ttft_s"]) == {"16"} and summary["decode_tokens_per_s"]["ours"] > 0
    return model, summary["artifact"]


def assert_greedy_as_transformers(model, reference, ids: np.ndarray, new_tokens: int) -> None:
    """Our greedy tokens are transformers', or differ first where its two best logits tie (within TIE)."""
    ours = model.generate(ids, new_tokens, eos_token_id=None).tokens
    with torch.no_grad():
        ref = reference.generate(torch.from_numpy(ids)[None], max_new_tokens=new_tokens, do_sample=False,
                                 eos_token_id=None, return_dict_in_generate=True, output_logits=True)
    theirs = ref.sequences[0, len(ids):].tolist()
    assert len(ours) == len(theirs) == new_tokens
    if ours != theirs:
        first = next(i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b)
        top2 = torch.topk(ref.logits[first][0], 2).values
        assert float(top2[0] - top2[1]) <= TIE, f"token {first} differs without a tie: {ours} vs {theirs}"


def test_greedy_tokens_are_transformers(built):
    reference, artifact = built
    model = load(artifact)
    for seed, length in enumerate((1, 7, MAX_LEN - NEW_TOKENS + 1)):
        ids = np.random.default_rng(seed).integers(0, model.vocab_size, length)
        assert_greedy_as_transformers(model, reference, ids, NEW_TOKENS)


def test_default_build_generates_as_transformers(built, tmp_path):
    reference, artifact = built
    tuned = load(artifact)
    config = reference.config
    weights = {k: v.detach().numpy() for k, v in reference.named_parameters()}
    directory, _ = build_artifact(tmp_path / "default", model="m", config=config, config_data=tuned.config,
                                  weights=weights, weights_source="test", target=resolve_target(None).target,
                                  max_len=MAX_LEN, buckets=(MAX_LEN,))
    ids = np.random.default_rng(5).integers(0, tuned.vocab_size, 9)
    assert_greedy_as_transformers(load(directory), reference, ids, NEW_TOKENS)


def test_eos_stops_and_sampling_is_seeded(built):
    model = load(built[1])
    ids = [3, 1, 4, 1, 5]
    tokens = model.generate(ids, 20, eos_token_id=None).tokens
    eos = tokens[4]
    stopped = model.generate(ids, 20, eos_token_id=eos).tokens
    assert stopped == tokens[:tokens.index(eos) + 1]
    a = model.generate(ids, 12, do_sample=True, top_k=20, seed=7).tokens
    assert a == model.generate(ids, 12, do_sample=True, top_k=20, seed=7).tokens
    assert all(0 <= t < model.vocab_size for t in a)


def test_generate_command(built, tmp_path):
    model = load(built[1])
    ours = model.generate([9, 11, 17], 8, eos_token_id=None).tokens
    proc = tune("generate", built[1], "--prompt-ids", "9,11,17", "--new-tokens", "8", "--ignore-eos", "--json",
                cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["tokens"] == ours and out["prompt_len"] == 3 and out["decode_tokens_per_s"] > 0
    text = tune("generate", built[1], "--prompt-len", "20", "--new-tokens", "4", cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "time to first token" in text.stdout and "decode" in text.stdout and "tokens: " in text.stdout


def test_bad_input_to_generate(built, tmp_path):
    artifact = built[1]
    for args, needle in [(["--prompt-len", str(MAX_LEN + 1)], "longer than the maximum length"),
                         (["--prompt-len", "40", "--new-tokens", "10"], "overflows the KV cache"),
                         (["--prompt-ids", ","], "empty prompt"),
                         (["--prompt-ids", "1,100000"], "token id 100000 outside the vocabulary")]:
        assert_one_line_error(tune("generate", artifact, *args, cwd=tmp_path), needle)
    copy = tmp_path / "copy"
    shutil.copytree(artifact, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps(dict(manifest, cpu="cortex-a72")))
    assert_one_line_error(tune("generate", str(copy), "--prompt-len", "3", cwd=tmp_path),
                          "compiled for CPU 'cortex-a72'")
    (copy / "manifest.json").write_text(json.dumps(manifest))
    library = copy / manifest["programs"][0]["library"]
    library.write_bytes(library.read_bytes() + b"x")
    assert_one_line_error(tune("generate", str(copy), "--prompt-len", "3", cwd=tmp_path), "edited or corrupt")
    library.unlink()
    assert_one_line_error(tune("generate", str(copy), "--prompt-len", "3", cwd=tmp_path), "missing")


def test_bad_input_to_whole_model_run(tmp_path):
    checkpoint = str(tmp_path / "ck")
    model = AutoModelForCausalLM.from_config(ARCHITECTURES["llama"][0](**read_config(CONFIG_DIR / "llama-tiny.json")))
    model.save_pretrained(tmp_path / "ck")
    file = tmp_path / "ck" / "model.safetensors"
    file.write_bytes(file.read_bytes()[:1000])
    assert_one_line_error(tune("run", "llama-tiny", "--whole-model", "--weights", checkpoint, "-q", cwd=tmp_path),
                          "truncated or corrupt")
    assert_one_line_error(tune("run", "qwen3-tiny", "--weights", str(tmp_path / "ck"), cwd=tmp_path),
                          "--weights needs --whole-model")
    model.save_pretrained(tmp_path / "ck")
    assert_one_line_error(tune("run", "qwen3-tiny", "--whole-model", "--weights", checkpoint, "-q", cwd=tmp_path),
                          "is not a qwen3-tiny")
    assert_one_line_error(tune("run", "qwen3-tiny", "--whole-model", "--max-seq-len", "5000", "-q", cwd=tmp_path),
                          "exceeds max_position_embeddings")

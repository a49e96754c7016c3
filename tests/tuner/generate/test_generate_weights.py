"""Reading a checkpoint written by save_pretrained: single and sharded, and each bad checkpoint."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from extract import ModelImportError
from extract.config import read_config
from extract.decoder import ARCHITECTURES
from extract.frontend import CONFIG_DIR
from tuner.generate.weights import random_weights, read_checkpoint


def _config(name="qwen3-tiny", **changes):
    data = dict(read_config(CONFIG_DIR / f"{name}.json"), **changes)
    return ARCHITECTURES[data["model_type"]][0](**data)


def _save(tmp_path, shard=None, name="qwen3-tiny"):
    model = AutoModelForCausalLM.from_config(_config(name))
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(tmp_path, **kwargs)
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("shard", [None, "100KB"], ids=["single", "sharded"])
def test_reads_what_save_pretrained_wrote(tmp_path, shard):
    state = _save(tmp_path, shard)
    if shard:
        assert (tmp_path / "model.safetensors.index.json").is_file()
        assert len(list(tmp_path.glob("*.safetensors"))) > 1
    data, weights = read_checkpoint(tmp_path)
    assert data["model_type"] == "qwen3"
    assert "lm_head.weight" not in weights  # tied
    for name, array in weights.items():
        assert array.dtype == np.float32
        np.testing.assert_array_equal(array, state[name])


def test_bfloat16_checkpoint_reads_as_float32(tmp_path):
    model = AutoModelForCausalLM.from_config(_config("llama-tiny")).to(torch.bfloat16)
    model.save_pretrained(tmp_path)
    _, weights = read_checkpoint(tmp_path)
    ref = model.model.embed_tokens.weight.detach().float().numpy()
    np.testing.assert_array_equal(weights["model.embed_tokens.weight"], ref)


def test_truncated_file(tmp_path):
    _save(tmp_path)
    file = tmp_path / "model.safetensors"
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    with pytest.raises(ModelImportError, match="truncated or corrupt safetensors file .*model.safetensors"):
        read_checkpoint(tmp_path)


def test_missing_shard(tmp_path):
    _save(tmp_path, "100KB")
    victim = sorted(tmp_path.glob("*.safetensors"))[0]
    victim.unlink()
    with pytest.raises(ModelImportError, match=f"shard missing: .*{victim.name}"):
        read_checkpoint(tmp_path)


def test_no_weights_or_config(tmp_path):
    with pytest.raises(ModelImportError, match="not found"):
        read_checkpoint(tmp_path / "nothing")
    with pytest.raises(ModelImportError, match="no config.json"):
        read_checkpoint(tmp_path)
    _save(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(ModelImportError, match="no .safetensors file"):
        read_checkpoint(tmp_path)


def test_config_that_does_not_match_the_weights(tmp_path):
    _save(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(dict(config, intermediate_size=96)))
    with pytest.raises(ModelImportError, match="does not match its config: .*mlp.*shape"):
        read_checkpoint(tmp_path)
    config.pop("layer_types", None)
    (tmp_path / "config.json").write_text(json.dumps(dict(config, num_hidden_layers=3)))
    with pytest.raises(ModelImportError, match="does not match its config: .* missing, e.g. model.layers.2"):
        read_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(dict(config, num_hidden_layers=3, layer_types=["x"])))
    with pytest.raises(ModelImportError, match="bad qwen3 config .*config.json"):
        read_checkpoint(tmp_path)


def test_random_weights_are_seeded_and_complete():
    config = _config("qwen2.5-tiny")
    a, b, c = random_weights(config, 0), random_weights(config, 0), random_weights(config, 1)
    assert set(a) == {n for n, _ in AutoModelForCausalLM.from_config(config).named_parameters()}
    assert any(n.endswith("q_proj.bias") for n in a)
    assert all(np.array_equal(a[n], b[n]) for n in a)
    assert not np.array_equal(a["model.embed_tokens.weight"], c["model.embed_tokens.weight"])


def test_random_weights_are_float32_for_a_bfloat16_config():
    config = _config("llama-tiny", torch_dtype="bfloat16")
    assert {a.dtype for a in random_weights(config, 0).values()} == {np.dtype(np.float32)}

"""Buckets, the manifest's checks and the prompt checks of the generating runtime (no compile)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tuner.generate.buckets import bucket_for, default_buckets, program_shapes
from tuner.generate.manifest import (
    MANIFEST,
    ArtifactError,
    Manifest,
    ProgramEntry,
    check_cpu,
    read_manifest,
    write_manifest,
)
from tuner.generate.runtime import ALIGNMENT, GeneratingModel, _aligned_zeros


def test_default_buckets_end_at_the_maximum():
    assert default_buckets(512) == (16, 32, 64, 128, 256, 512)
    assert default_buckets(100) == (16, 32, 64, 100)
    assert default_buckets(8) == (8,)
    with pytest.raises(ValueError):
        default_buckets(0)


def test_bucket_for_is_the_smallest_that_holds():
    buckets = (16, 32, 100)
    assert [bucket_for(n, buckets) for n in (1, 16, 17, 32, 33, 100)] == [16, 16, 32, 32, 100, 100]
    for bad in (0, 101):
        with pytest.raises(ValueError, match=str(bad)):
            bucket_for(bad, buckets)


def test_program_shapes_cover_prefill_and_decode():
    shapes = program_shapes((16, 32))
    assert shapes == [("attn_in", 1, 0), ("attn_in", 16, 0), ("attn_in", 32, 0), ("attn_out", 16, 16),
                      ("attn_out", 32, 32), ("attn_out", 1, 16), ("attn_out", 1, 32), ("head", 1, 0)]
    assert len(set(program_shapes((1,)))) == len(program_shapes((1,)))


def _manifest(tmp_path) -> Manifest:
    (tmp_path / "a.so").write_bytes(b"library")
    (tmp_path / "w.safetensors").write_bytes(b"weights")
    entry = ProgramEntry("head", 1, 0, "a.so", ["hidden_states"], ["model.norm.weight"], False, "k")
    manifest = Manifest(model="m", config={"vocab_size": 4}, target="{}", cpu="znver4", max_len=16, buckets=[16],
                        programs=[entry], weights_file="w.safetensors", weights_source="random", versions={})
    write_manifest(tmp_path, manifest)
    return manifest


def test_manifest_round_trip_records_hashes(tmp_path):
    written = _manifest(tmp_path)
    read = read_manifest(tmp_path)
    assert read.programs == written.programs
    assert set(read.files) == {"a.so", "w.safetensors"}


@pytest.mark.parametrize("damage, needle", [
    (lambda d: (d / "a.so").write_bytes(b"librarx"), "edited or corrupt"),
    (lambda d: (d / "w.safetensors").unlink(), "missing"),
    (lambda d: (d / MANIFEST).write_text("{"), "malformed"),
    (lambda d: (d / MANIFEST).unlink(), "no manifest.json"),
    (lambda d: (d / MANIFEST).write_text(json.dumps(dict(json.loads((d / MANIFEST).read_text()), format=99))),
     "format 99"),
    (lambda d: (d / MANIFEST).write_text(json.dumps(dict(json.loads((d / MANIFEST).read_text()), files={}))),
     "records no hash"),
], ids=["edited", "missing", "malformed", "no-manifest", "format", "unrecorded"])
def test_damaged_artifact_is_refused(tmp_path, damage, needle):
    _manifest(tmp_path)
    damage(tmp_path)
    with pytest.raises(ArtifactError, match=needle):
        read_manifest(tmp_path)


def test_other_cpu_is_refused(tmp_path):
    manifest = _manifest(tmp_path)
    check_cpu(manifest, "znver4")
    with pytest.raises(ArtifactError, match="compiled for CPU 'znver4'.*this CPU is 'skylake'"):
        check_cpu(manifest, "skylake")


def _model(max_len=16) -> GeneratingModel:
    config = {"num_hidden_layers": 2, "vocab_size": 10, "num_key_value_heads": 2, "head_dim": 8,
              "hidden_size": 16, "num_attention_heads": 2}
    return GeneratingModel(config, {}, {}, np.zeros((10, 16), np.float32), max_len, (16,))


@pytest.mark.parametrize("ids, new, needle", [
    ([], 1, "empty prompt"), ([1, 10], 1, "token id 10 outside"), ([-1], 1, "token id -1"),
    ([1] * 17, 1, "longer than the maximum length 16"), ([1] * 10, 8, "overflows the KV cache"),
    ([1], 0, "at least 1"),
])
def test_bad_prompts(ids, new, needle):
    with pytest.raises(ValueError, match=needle):
        _model().check_prompt(ids, new)


def test_prompt_that_fills_the_cache_exactly():
    assert _model().check_prompt([1] * 10, 7).tolist() == [1] * 10  # the last token is never written


def test_kv_cache_is_aligned_per_layer():
    keys, values = _model().new_cache()
    assert keys.shape == (2, 16, 2, 8) and keys.dtype == np.float32
    for layer in range(2):
        assert keys[layer].ctypes.data % ALIGNMENT == 0 and values[layer].ctypes.data % ALIGNMENT == 0
    with pytest.raises(ValueError, match="multiple of 64"):
        _aligned_zeros((2, 3, 1, 1))


def test_timed_prompts_leave_room_to_decode():
    from tuner.generate.whole import DECODE_STEPS, _decode_steps, _prompts

    assert list(_prompts(2048, 10)) == [16, 128, 512]
    assert list(_prompts(144, 10)) == [16, 128]
    for max_len in (1, 2, 16, 17):
        (length, ids), = _prompts(max_len, 10).items()
        steps = _decode_steps(max_len, length)
        assert ids.size == length and 0 <= steps <= DECODE_STEPS and length + steps <= max_len
    assert _decode_steps(1, 1) == 0

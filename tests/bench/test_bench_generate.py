"""The generation benchmark: its roofline arithmetic, its rows without llama.cpp, and its llama.cpp part run quick."""

import pytest

from bench import llamacpp
from bench.decoders import Timings, best_of
from bench.generate import decode_rows, float32_bytes, roofline_tokens_per_s, run, ttft_rows, weight_bytes_per_token
from extract.config import read_config
from extract.frontend import CONFIG_DIR
from tuner.generate.weights import make_config


def test_bytes_per_token_reads_the_head_whole_and_one_embedding_row():
    tensors = {"embed": 1000, "layer": 300, "head": 1000}
    assert weight_bytes_per_token(tensors, "embed", 10, "head") == 300 + 1000 + 100  # untied: one row of the table
    del tensors["head"]
    assert weight_bytes_per_token(tensors, "embed", 10, "head") == 1000 + 300 + 100  # tied: the table is the head
    assert roofline_tokens_per_s(2e9, 30e9) == pytest.approx(15.0)


def test_qwen3_float32_bytes_per_token_from_its_config():
    data = read_config(CONFIG_DIR / "qwen3-0.6b.json")
    h, inter, vocab = data["hidden_size"], data["intermediate_size"], data["vocab_size"]
    layers = data["num_hidden_layers"]
    hd, q, kv = data["head_dim"], data["num_attention_heads"], data["num_key_value_heads"]
    per_layer = h * q * hd * 2 + 2 * h * kv * hd + 3 * h * inter + 2 * h + 2 * hd  # q, o; k, v; MLP; norms
    params = vocab * h + layers * per_layer + h  # tied embedding (also the head), layers, final norm
    got = weight_bytes_per_token(float32_bytes(make_config(data, "qwen3-0.6b")), "model.embed_tokens.weight", vocab,
                                 "lm_head.weight")
    assert got == pytest.approx(4 * params + 4 * h)
    assert 2.3e9 < got < 2.45e9  # issue 44's figure: about 2.38 GB a token


def test_rows_without_llama_cpp_say_why_and_judge_ours():
    why = llamacpp.INSTALL
    ours = Timings("ours", ttft_s=[0.5, 0.6, 0.9], decode_s={128: [0.1, 0.1, 0.2]})
    eager = Timings("eager", ttft_s=[1.0], decode_s={128: [0.125]})
    rows = ttft_rows({"ours": ours, "eager": eager}, 128, why)
    assert rows[0].anchor_name == "PyTorch eager" and rows[0].ratio == pytest.approx(1.0 / 0.6)
    assert rows[0].met is True  # medians: 0.6 s against 1.0 s
    decode = decode_rows({"ours": ours, "eager": eager}, {"ours": 12.5, "eager": 12.5, "F32": 20.0}, 128, why)
    assert decode[0].ours == pytest.approx(10.0) and decode[0].ratio == pytest.approx(0.8) and decode[0].met is False
    llama = [r for r in decode if "llama.cpp F32" in r.anchor_name]
    assert llama and all("not installed" in r.anchor_name and r.anchor is None for r in llama)
    int4 = next(r for r in decode if "ours int4" in r.what)
    assert int4.met is False and int4.ours is None


def test_best_of_takes_each_figure_from_its_best_pass():
    busy = Timings("ours", load_s=1.0, ttft_s=[2.0, 2.0], decode_s={16: [0.1, 0.1], 64: [0.5]})
    quiet = Timings("ours", load_s=2.0, ttft_s=[1.0, 3.0], decode_s={16: [0.2, 0.2], 64: [0.25]})
    merged = best_of([busy, Timings("ours", "failed", "crashed"), quiet])
    assert merged.status == "ok" and merged.load_s == 1.0
    assert merged.ttft_s == [2.0, 2.0]  # medians 2.0 against 2.0: the first
    assert merged.tokens_per_s(16) == pytest.approx(10.0) and merged.tokens_per_s(64) == pytest.approx(4.0)
    assert best_of([Timings("x", "failed", "a"), Timings("x", "failed", "b")]).error == "b"
    with pytest.raises(ValueError):
        best_of([])


def test_quick_llama_cpp_part_loads_and_generates_every_format():
    if llamacpp.installed():
        pytest.skip(llamacpp.installed())
    source, reason = llamacpp.converter_dir()
    if source is None:
        pytest.skip(reason)
    result = run(quick=True, contenders=("llama",))
    formats = result.plot["contenders"]
    assert set(formats) == set(llamacpp.FORMATS)
    for name, figures in formats.items():
        assert figures["status"] == "ok", (name, figures["error"])
        assert figures["ttft_s"] > 0 and all(v > 0 for v in figures["tokens_per_s"].values())
    per_token = result.plot["bytes_per_token"]
    assert per_token["Q4_0"] < per_token["Q8_0"] < per_token["F32"] == pytest.approx(per_token["ours"], rel=0.01)

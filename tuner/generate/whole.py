"""``tune run --whole-model``: the whole model's programs compiled into an artifact, then timed.

The weights are seeded random ones from the config, or a local checkpoint
(``--weights DIR``). Every program is compiled at every bucket (see
:mod:`tuner.generate.build`), its kernels tuned through the tuning database
(:mod:`tuner.generate.tuned`; ``--trials 0`` lets the cost model choose without
measuring). The artifact is then loaded as a user would load it and timed
beside transformers eager on the same weights, in the same run: time to first token
at each timed prompt length and decode tokens per second (median over steps).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from extract import ModelImportError, check_model
from extract.config import dtype_note

__all__ = ["WholeModelSummary", "build_whole_model", "time_eager", "time_model"]

TIMED_PROMPTS = (16, 128, 512)
"""Prompt lengths whose time to first token the summary reports (those within the maximum length)."""
DECODE_STEPS = 16


@dataclass
class WholeModelSummary:
    """What ``tune run --whole-model`` reports (``--json`` prints :meth:`as_json`).

    ``ttft_s``: prompt length -> seconds to the first token, ours and transformers eager
    (median over ``repeats``); ``decode_tokens_per_s``: ours and eager, median decode step
    after a prompt of 16 tokens; ``build``: ``"default"`` (TVM's untuned build) or ``"tuned"``.
    """

    model: str
    artifact: str
    target: str
    max_len: int
    buckets: list[int]
    weights: str
    build: str
    import_s: float
    compile_s: float
    ttft_s: dict = field(default_factory=dict)
    decode_tokens_per_s: dict = field(default_factory=dict)
    load_average: list[float] = field(default_factory=list)
    tuning: dict = field(default_factory=dict)

    def as_json(self) -> dict:
        """Plain JSON values."""
        return asdict(self)


def _resolve(model: str, weights_dir: str | None, seed: int):
    """(label, config dict, weights, weights source) of the model argument and ``--weights``."""
    from .weights import make_config, random_weights, read_checkpoint

    if weights_dir:
        data, weights = read_checkpoint(weights_dir)
        named = check_model(model).config if model else None
        if named:
            differ = [k for k in ("model_type", "hidden_size", "intermediate_size", "num_attention_heads",
                                  "num_key_value_heads", "num_hidden_layers", "vocab_size")
                      if k in named and named.get(k) != data.get(k)]
            if differ:
                raise ModelImportError(f"checkpoint {weights_dir} is not a {model}: {differ[0]} is "
                                       f"{data.get(differ[0])}, {model}'s is {named[differ[0]]}")
        return Path(weights_dir).resolve().name, data, weights, f"checkpoint {Path(weights_dir).resolve()}"
    source = check_model(model)
    if source.kind != "config":
        raise ModelImportError("--whole-model needs a transformers config or a built-in model name, not an ONNX file")
    config = make_config(source.config, source.path)
    return source.label, source.config, random_weights(config, seed), f"random, seed {seed}"


def build_whole_model(model: str, *, weights_dir: str | None, max_len: int, seed: int, target,
                      artifact_dir: str, progress, tuning: dict | None = None) -> WholeModelSummary:
    """Compile the whole model into an artifact under ``artifact_dir`` and time it; see the module docstring.

    ``target`` is a :class:`tuner.target.ResolvedTarget`. ``tuning``, when given, holds the
    keyword arguments of :func:`tuner.generate.tuned.tune_programs` other than the shapes,
    target, seed, model and its hash (``db_url``, ``trials``, ``measure_config``,
    ``tracker``, ``args``): the kernels are tuned and chosen through the tuning database;
    without it TVM's default build compiles them.

    Raises
    ------
    extract.ModelImportError
        A bad model argument, checkpoint or maximum length.
    """
    from .buckets import default_buckets
    from .build import build_artifact, export_shapes
    from .weights import make_config

    if max_len < 1:
        raise ModelImportError(f"--max-seq-len must be positive, got {max_len}")
    with progress.status("reading the weights"):
        label, data, weights, weights_source = _resolve(model, weights_dir, seed)
    if note := dtype_note(data):
        progress.note(note)
    config = make_config(data, weights_dir or model)
    if max_len > config.max_position_embeddings:
        raise ModelImportError(f"--max-seq-len {max_len} exceeds max_position_embeddings="
                               f"{config.max_position_embeddings}")
    key = hashlib.sha256(json.dumps([data, weights_source, max_len, target.record.target_json],
                                    sort_keys=True).encode())
    directory = Path(artifact_dir) / f"{label}-{key.hexdigest()[:8]}"
    buckets = default_buckets(max_len)
    shapes, import_s = export_shapes(config, buckets, progress)
    compile_program, record = None, None
    if tuning is not None:
        from .tuned import tune_programs

        tuned = tune_programs({k: prepared for k, (_, prepared) in shapes.items()}, target=target, seed=seed,
                              model=f"{label} whole model max_len={max_len}", model_hash=key.hexdigest(),
                              progress=progress, **tuning)
        compile_program, record = tuned.compile, tuned.tuning
    built, timings = build_artifact(directory, model=label, config=config, config_data=data, weights=weights,
                                    weights_source=weights_source, target=target.target, max_len=max_len,
                                    buckets=buckets, shapes=shapes, compile_program=compile_program,
                                    tuning=record, progress=progress)
    from . import load

    with progress.status("timing the model and transformers eager"):
        loaded = load(built)
        ours_ttft, ours_decode = time_model(loaded, max_len)
        eager_ttft, eager_decode = time_eager(config, weights, max_len)
    import os

    return WholeModelSummary(
        model=label, artifact=str(built), target=target.record.target_json, max_len=max_len,
        buckets=list(loaded.buckets),
        weights=weights_source, build="default" if tuning is None else "tuned", import_s=import_s,
        compile_s=timings["compile_s"],
        ttft_s={str(n): {"ours": ours_ttft[n], "eager": eager_ttft[n]} for n in ours_ttft},
        decode_tokens_per_s={"ours": ours_decode, "eager": eager_decode}, load_average=list(os.getloadavg()),
        tuning=record or {},
    )


def _prompts(max_len: int, vocab: int) -> dict[int, np.ndarray]:
    """Random prompts of the timed lengths that leave room for the decode steps (else one of half the cache)."""
    lengths = [n for n in TIMED_PROMPTS if n + DECODE_STEPS <= max_len] or [max(1, max_len // 2)]
    rng = np.random.default_rng(0)
    return {n: rng.integers(0, vocab, n) for n in lengths}


def _decode_steps(max_len: int, prompt: int) -> int:
    """Decode steps timed after a prompt of ``prompt`` tokens: at most ``DECODE_STEPS``, as the cache allows."""
    return min(DECODE_STEPS, max_len - prompt)


def time_model(model, max_len: int, repeats: int = 3) -> tuple[dict[int, float], float | None]:
    """Median time to first token (seconds) per timed prompt length, and decode tokens/s (None: no room
    in the cache for a decode step), of a loaded artifact."""
    prompts = _prompts(max_len, model.vocab_size)
    model.generate(next(iter(prompts.values())), 2)  # warm-up: first calls load code and pages
    ttft = {n: float(np.median([model.generate(ids, 1).prefill_s for _ in range(repeats)]))
            for n, ids in prompts.items()}
    first = next(iter(prompts.values()))
    steps = model.generate(first, _decode_steps(max_len, first.size) + 1, eos_token_id=None).decode_s
    return ttft, 1.0 / float(np.median(steps)) if steps else None


def time_eager(config, weights: dict[str, np.ndarray], max_len: int, repeats: int = 3
               ) -> tuple[dict[int, float], float | None]:
    """As :func:`time_model` for transformers' eager model (SDPA attention, its default) on the same weights."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(config).float().eval()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()}, strict=False)
    model.tie_weights()
    prompts = _prompts(max_len, config.vocab_size)

    def prefill(ids):
        start = time.perf_counter()
        out = model(torch.from_numpy(ids)[None], use_cache=True)
        return time.perf_counter() - start, out

    with torch.no_grad():
        prefill(next(iter(prompts.values())))  # warm-up
        ttft = {n: float(np.median([prefill(ids)[0] for _ in range(repeats)])) for n, ids in prompts.items()}
        first = next(iter(prompts.values()))
        _, out = prefill(first)
        steps = []
        for _ in range(_decode_steps(max_len, first.size)):
            token = out.logits[:, -1:].argmax(-1)
            start = time.perf_counter()
            out = model(token, cache=out.past_key_values, use_cache=True)
            steps.append(time.perf_counter() - start)
    return ttft, 1.0 / float(np.median(steps)) if steps else None

"""Whole-model generation: ours beside transformers eager and llama.cpp (F32, Q8_0, Q4_0), and each format's roofline.

``python -m bench.generate [--quick] [--model NAME] [--trials N] [--llama-cpp-dir DIR] [--json]``

One checkpoint of random weights (``--model``'s shipped config, written by transformers'
``save_pretrained`` with a byte-level BPE tokenizer, :mod:`bench.llamacpp`) is run by
every contender, each in a process of its own on the same thread count
(:mod:`bench.decoders`), on token ids:

- **ours**: the whole-model artifact of :mod:`tuner.generate` built from the checkpoint
  (``--weights``), its buckets those of ``tune run --whole-model --max-seq-len`` the
  longest length timed; each kernel's schedule is chosen through the tuning database as
  ``tune run`` chooses it (:func:`tuner.generate.tuned.tune_programs`), with ``--trials``
  measurements per workload (default 0: none measured, every schedule is the cost
  model's pick, the empty database's run starting from the shipped pretrained cost
  model);
- **PyTorch eager**: transformers' model of the checkpoint (SDPA attention, its default);
- **llama.cpp F32, Q8_0, Q4_0**: the checkpoint converted by llama.cpp's own converter
  and quantized by llama.cpp (:mod:`bench.llamacpp`); "not installed" rows when
  ``llama-cpp-python`` or the converter is missing.

Figures, medians of repeats: time to first token for a ``--prompt-len`` prompt (default
128) and decode tokens/s at each ``--cache-lens`` length (default 128 and 1024: the rows
a step's attention reads). The contenders are timed one after another (together their
weights would not fit beside other work in 24 GiB), in ``--passes`` passes (default 2),
each figure from the contender's best pass (:func:`bench.decoders.best_of`), so that a
busy spell of a shared machine falls on one pass and not on one contender alone.

Beside each figure, its format's bandwidth roofline: the weight bytes a decode step reads
(:func:`weight_bytes_per_token`) over the STREAM copy bandwidth measured in the same run
(:func:`measure.roofline.measure_bandwidth`), the bound the issues set for decode, which
reads every weight once a token.

Goals (issues 44 and 46): our float32 decode at least 0.95 of its roofline and faster
than every float32 peer, our time to first token 1.4x faster than the fastest float32
peer; each of our formats at least as fast as llama.cpp's counterpart (F32, Q8_0, Q4_0),
decode and time to first token. Ours has float32 weights only so far: the int8 and
int4 rows are not met, with llama.cpp's figure.

``--quick`` runs the tiny config (``qwen3-tiny``): a 16-token prompt, cache lengths 16
and 64, 3 repeats: a smoke test of the script, not a figure.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from . import llamacpp
from .common import BenchResult, Row, bench_parser, check_model_option, fmt, positive_int, print_result, ratio_row
from .decoders import Eager, LlamaCpp, Ours, Plan, Timings, best_of, time_contender

NAME, TITLE = "generate", "Whole-model generation: ours against transformers eager, llama.cpp and the roofline"
CONTENDERS = ("ours", "eager", "llama")
#: our weight format -> llama.cpp's counterpart (issue 46); only float32 exists so far
COUNTERPARTS = {"float32": "F32", "int8": "Q8_0", "int4": "Q4_0"}
OURS_FORMATS = ("float32",)
ROOFLINE_GOAL = 0.95  # our float32 decode against its roofline (issue 44)
TTFT_GOAL = 1.4  # our time to first token against the fastest float32 peer (issue 44)
LABELS = {"ours": "ours float32", "eager": "PyTorch eager", **{f: f"llama.cpp {f}" for f in llamacpp.FORMATS}}


def weight_bytes_per_token(tensor_bytes: dict[str, int], embedding: str, rows: int, head: str) -> float:
    """Weight bytes one decode step reads: every tensor once, the token embedding one row of ``rows``.

    ``tensor_bytes`` maps each weight's name to its bytes; ``embedding`` names the token
    embedding table (``rows`` rows, the vocabulary), ``head`` the LM head. With tied
    embeddings (no ``head`` in ``tensor_bytes``) the table is also the head and is read
    whole, plus the row the lookup reads.

    Raises
    ------
    KeyError
        ``embedding`` not in ``tensor_bytes``.
    """
    table = tensor_bytes[embedding]
    row = table / rows
    if head in tensor_bytes:
        return sum(tensor_bytes.values()) - table + row
    return sum(tensor_bytes.values()) + row


def roofline_tokens_per_s(bytes_per_token: float, bandwidth_bytes_per_s: float) -> float:
    """Decode tokens/s bound by memory bandwidth: ``bandwidth / bytes read per token`` (Williams, Waterman
    and Patterson 2009, at the arithmetic intensity of a GEMV, where the bandwidth roof binds)."""
    return bandwidth_bytes_per_s / bytes_per_token


def float32_bytes(config) -> dict[str, int]:
    """Bytes of each float32 weight of ``config``'s causal LM under its checkpoint name (tied head left out)."""
    from tuner.generate.weights import expected_shapes

    return {name: 4 * int(np.prod(shape)) for name, shape in expected_shapes(config).items()}


def write_checkpoint(data: dict, directory: Path, seed: int) -> None:
    """A ``save_pretrained`` checkpoint of ``data``'s model with seeded random float32 weights and a tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM

    from extract.decoder import random_init
    from tuner.generate.weights import make_config

    config = make_config(data, directory)
    model = AutoModelForCausalLM.from_config(config).to(torch.float32)
    random_init(model, config.initializer_range, seed)
    model.config.torch_dtype = torch.float32
    model.save_pretrained(directory)
    llamacpp.write_tokenizer(directory, min(llamacpp.TOKENIZER_VOCAB, config.vocab_size))


def build_ours(checkpoint: Path, max_len: int, trials: int, seed: int, work: Path) -> tuple[str, dict]:
    """Our artifact of ``checkpoint`` (``tune run --whole-model --weights`` with ``--max-seq-len max_len``).

    Returns the artifact directory and a description: ``build`` (how the schedules were
    chosen), the sources of the kernels' schedules, and import, choice and compile seconds.
    """
    from measure.protocol import MeasureConfig
    from tuner.cost_model.shipped import load_shipped, pretrained_path
    from tuner.generate.buckets import default_buckets
    from tuner.generate.build import build_artifact, export_shapes
    from tuner.generate.tuned import tune_programs
    from tuner.generate.weights import make_config, read_checkpoint
    from tuner.progress import Progress
    from tuner.target import resolve_target

    data, weights = read_checkpoint(checkpoint)
    config = make_config(data, checkpoint)
    target = resolve_target()
    db_url = f"sqlite:///{work / 'tune.db'}"
    path = pretrained_path()  # what the empty database's run starts from (tuner.cost_model.store.starting_model)
    shipped = load_shipped(path) if path is not None else None
    shapes, import_s = export_shapes(config, default_buckets(max_len))
    start = time.perf_counter()
    tuned = tune_programs({key: prepared for key, (_, prepared) in shapes.items()}, target=target, seed=seed,
                          db_url=db_url, trials=trials, measure_config=MeasureConfig(), tracker=None,
                          model=f"{checkpoint.name} whole model max_len={max_len}", model_hash=checkpoint.name,
                          args={"bench": NAME, "trials": trials}, progress=Progress(quiet=True))
    choose_s = time.perf_counter() - start
    directory, timings = build_artifact(
        work / "artifact", model=checkpoint.name, config=config, config_data=data, weights=weights,
        weights_source=f"checkpoint {checkpoint.name}", target=target.target, max_len=max_len,
        shapes=shapes, compile_program=tuned.compile, tuning=tuned.tuning)
    sources: dict[str, int] = {}
    for schedule in tuned.tuning["schedules"]:
        sources[schedule["source"]] = sources.get(schedule["source"], 0) + 1
    how = (f"{trials} trials per workload" if trials else "no measurement") + (
        f", cost model: the shipped one ({shipped.describe()})" if shipped is not None else ", no cost model")
    return str(directory), {"build": how, "schedules": sources, "import_s": import_s, "choose_s": choose_s,
                            "compile_s": timings["compile_s"]}


def prepare_llama(checkpoint: Path, work: Path, llama_dir: str | None, threads: int) -> tuple[dict, dict, str]:
    """GGUF files of every llama.cpp format and their weight bytes per token, or why there are none.

    Returns ``({format: path}, {format: bytes per token}, reason)``; ``reason`` is empty when built.
    """
    why = llamacpp.installed()
    source, reason = llamacpp.converter_dir(llama_dir)
    if why or source is None:
        return {}, {}, why or reason
    try:
        paths = {"F32": llamacpp.convert(checkpoint, work / "model-F32.gguf", source)}
        for fmt_name in llamacpp.FORMATS[1:]:
            paths[fmt_name] = llamacpp.quantize(paths["F32"], work / f"model-{fmt_name}.gguf", fmt_name, threads)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return {}, {}, f"no GGUF file ({type(exc).__name__}: {exc})"
    vocab = json.loads((checkpoint / "config.json").read_text())["vocab_size"]
    per_token = {f: weight_bytes_per_token(llamacpp.gguf_tensor_bytes(p, source), "token_embd.weight", vocab,
                                           "output.weight") for f, p in paths.items()}
    return {f: str(p) for f, p in paths.items()}, per_token, ""


def _tps(timings: dict[str, Timings], name: str, cache_len: int) -> float | None:
    t = timings.get(name)
    return t.tokens_per_s(cache_len) if t is not None else None


def _ttft(timings: dict[str, Timings], name: str) -> float | None:
    t = timings.get(name)
    return t.ttft_median_s if t is not None else None


def _label(timings: dict[str, Timings], name: str, missing: str) -> str:
    """A contender's label, with why it has no figure (not installed, failed) when it has none."""
    t = timings.get(name)
    if t is None:
        return f"{LABELS[name]} ({missing or 'not run'})"
    return LABELS[name] if t.status == "ok" else f"{LABELS[name]} (failed)"


def decode_rows(timings: dict[str, Timings], roofs: dict[str, float], cache_len: int, llama_missing: str
                ) -> list[Row]:
    """The decode rows at one cache length: ours against its roofline, the fastest float32 peer and llama.cpp's
    counterparts; every peer against its own format's roofline (reported)."""
    what = f"decode tokens/s at cache {cache_len}"
    ours = _tps(timings, "ours", cache_len)
    rows = [ratio_row(f"{what}, ours float32 / float32 roofline", ours, roofs.get("ours"),
                      "float32 roofline (STREAM copy)", ROOFLINE_GOAL, f"ratio >= {ROOFLINE_GOAL}")]
    peers = {n: _tps(timings, n, cache_len) for n in ("eager", "F32")}
    timed = {n: v for n, v in peers.items() if v}
    best = max(timed, key=timed.get) if timed else "eager"
    rows.append(ratio_row(f"{what}, ours / fastest float32 peer", ours, timed.get(best),
                          _label(timings, best, llama_missing), 1.0, "ratio >= 1.0"))
    for ours_fmt, theirs in COUNTERPARTS.items():
        rows.append(_counterpart_row(f"{what}, ours {ours_fmt} / llama.cpp {theirs}",
                                     ours if ours_fmt in OURS_FORMATS else None, _tps(timings, theirs, cache_len),
                                     _label(timings, theirs, llama_missing), ours_fmt, higher_is_better=True))
    for name in ("eager", *llamacpp.FORMATS):
        value, roof = _tps(timings, name, cache_len), roofs.get(name)
        rows.append(Row(f"{what}, {LABELS[name]} / its roofline {fmt(roof)} tokens/s", None, value,
                        _label(timings, name, llama_missing), value / roof if value and roof else None, "reported",
                        None))
    return rows


def _counterpart_row(what: str, ours: float | None, anchor: float | None, anchor_name: str, ours_fmt: str,
                     higher_is_better: bool) -> Row:
    """Ours in ``ours_fmt`` against llama.cpp's counterpart (goal ratio >= 1); not met where ours has no such format."""
    if ours_fmt not in OURS_FORMATS:
        return Row(what, None, anchor, anchor_name, None, f"ratio >= 1.0 (ours has no {ours_fmt} weights yet)", False)
    return ratio_row(what, ours, anchor, anchor_name, 1.0, "ratio >= 1.0", higher_is_better=higher_is_better)


def ttft_rows(timings: dict[str, Timings], prompt_len: int, llama_missing: str) -> list[Row]:
    """Time to first token: ours against the fastest float32 peer (1.4x) and llama.cpp's counterparts."""
    what = f"time to first token, {prompt_len}-token prompt (s)"
    ours = _ttft(timings, "ours")
    peers = {n: _ttft(timings, n) for n in ("eager", "F32")}
    timed = {n: v for n, v in peers.items() if v}
    best = min(timed, key=timed.get) if timed else "eager"
    rows = [ratio_row(f"{what}, speed-up over the fastest float32 peer", ours, timed.get(best),
                      _label(timings, best, llama_missing), TTFT_GOAL, f"ratio >= {TTFT_GOAL}",
                      higher_is_better=False)]
    for ours_fmt, theirs in COUNTERPARTS.items():
        rows.append(_counterpart_row(f"{what}, speed-up of ours {ours_fmt} over llama.cpp {theirs}",
                                     ours if ours_fmt in OURS_FORMATS else None, _ttft(timings, theirs),
                                     _label(timings, theirs, llama_missing), ours_fmt, higher_is_better=False))
    return rows


def run(quick: bool = False, model: str | None = None, prompt_len: int | None = None,
        cache_lens: tuple[int, ...] | None = None, repeat: int | None = None, steps: int = 4, trials: int = 0,
        llama_dir: str | None = None, contenders: tuple[str, ...] = CONTENDERS, seed: int = 0,
        passes: int | None = None) -> BenchResult:
    """Run the benchmark; see the module docstring."""
    import tempfile

    from extract import check_model
    from measure.roofline import measure_bandwidth
    from measure.threads import physical_cores
    from tuner.generate.weights import make_config

    model = model or ("qwen3-tiny" if quick else "qwen3-0.6b")
    prompt_len = prompt_len or (16 if quick else 128)
    cache_lens = tuple(cache_lens or ((16, 64) if quick else (128, 1024)))
    repeat = repeat or (3 if quick else 5)
    passes = passes or (1 if quick else 2)
    threads = physical_cores()
    command = " ".join(["python", "-m", "bench.generate"] + sys.argv[1:])
    result = BenchResult(name=NAME, title=f"Whole-model generation: {model}", command=command)
    start = time.time()
    data = check_model(model).config
    config = make_config(data, model)
    max_len = max(prompt_len, *cache_lens)
    prompt = tuple(int(i) for i in np.random.default_rng(seed).integers(0, config.vocab_size, prompt_len))
    plan = Plan(prompt, cache_lens, repeat, steps, threads)
    bandwidths = [measure_bandwidth(threads)]
    roof_bytes = {"ours": weight_bytes_per_token(float32_bytes(config), "model.embed_tokens.weight",
                                                 config.vocab_size, "lm_head.weight")}
    roof_bytes["eager"] = roof_bytes["ours"]
    notes = []
    with tempfile.TemporaryDirectory(prefix="bench-generate-") as tmp:
        work = Path(tmp)
        checkpoint = work / f"{model}-random"
        write_checkpoint(data, checkpoint, seed)
        builds = {}
        if "ours" in contenders:
            artifact, how = build_ours(checkpoint, max_len, trials, seed, work)
            builds["ours"] = (Ours, (artifact,))
            notes.append(f"Ours: the artifact of the checkpoint, buckets of --max-seq-len {max_len}, schedules chosen "
                         f"with {how['build']}; schedule sources {how['schedules']}; import {how['import_s']:.0f} s, "
                         f"choice {how['choose_s']:.0f} s, compile {how['compile_s']:.0f} s.")
        if "eager" in contenders:
            builds["eager"] = (Eager, (str(checkpoint),))
        llama_missing = "not run"
        if "llama" in contenders:
            paths, per_token, llama_missing = prepare_llama(checkpoint, work, llama_dir, threads)
            roof_bytes.update(per_token)
            n_ctx = max_len + 1
            builds.update({f: (LlamaCpp, (p, n_ctx)) for f, p in paths.items()})
            if llama_missing:
                notes.append(f"llama.cpp: {llama_missing}.")
        gc.collect()
        runs: dict[str, list[Timings]] = {name: [] for name in builds}
        loads = [0.0]
        for number in range(passes):  # every contender once a pass, so a busy spell falls on one pass of each
            if number:
                bandwidths.append(measure_bandwidth(threads))
            for name, (engine, args) in builds.items():
                load = os.getloadavg()[0]
                t = time_contender(name, engine, args, plan)
                loads += [load, os.getloadavg()[0]]
                runs[name].append(t)
                state = "ok" if t.status == "ok" else f"failed: {t.error}"
                ttft = fmt(t.ttft_median_s)
                tps = ", ".join(f"{fmt(t.tokens_per_s(c))} at {c}" for c in cache_lens)
                notes.append(f"Pass {number + 1}, {LABELS[name]}: {state}; loaded in {fmt(t.load_s)} s; time to "
                             f"first token {ttft} s; decode tokens/s {tps}; load average {load:.2f} before, "
                             f"{loads[-1]:.2f} after.")
        timings = {name: best_of(r) for name, r in runs.items()}
    bandwidth = max(bandwidths)  # the quietest pass's: the bound, as each contender's figure is its best pass's
    roofs = {n: roofline_tokens_per_s(b, bandwidth) for n, b in roof_bytes.items()}
    result.rows += ttft_rows(timings, prompt_len, llama_missing)
    for cache_len in cache_lens:
        result.rows += decode_rows(timings, roofs, cache_len, llama_missing)
    result.notes += [
        f"{model}, random weights (seed {seed}), one checkpoint for every contender; {threads} threads each, each in a "
        f"process of its own; prompt {prompt_len} tokens; decode at cache lengths {', '.join(map(str, cache_lens))} "
        f"(rows a step's attention reads); medians of {repeat} prompts and {repeat * steps} steps; {passes} pass(es), "
        "each contender in a fresh process in each, each figure from its best pass (the notes give every pass).",
        f"Bandwidth {bandwidth / 1e9:.1f} GB/s (STREAM copy, measured in this run before each pass: "
        + ", ".join(f"{b / 1e9:.1f}" for b in bandwidths) + " GB/s; the best is the roofline's); weight bytes a "
        "decode step reads: "
        + ", ".join(f"{LABELS[n]} {fmt(b, 4)} bytes" for n, b in roof_bytes.items()) + ".",
        *notes,
    ]
    if max(loads) > threads:
        result.notes.append(f"The load average reached {max(loads):.1f} on {threads} cores while contenders ran: "
                            "other work shared the machine, and the figures are those of a busy machine.")
    result.notes += [f"Not met: {r.what}: ours {fmt(r.ours)}, {r.anchor_name} {fmt(r.anchor)}."
                     for r in result.rows if r.met is False]
    result.plot = {"kind": "generate", "bandwidth_bytes_per_s": bandwidth, "bytes_per_token": roof_bytes,
                   "contenders": {n: {"status": t.status, "error": t.error, "ttft_s": t.ttft_median_s,
                                      "tokens_per_s": {str(c): t.tokens_per_s(c) for c in cache_lens}}
                                  for n, t in timings.items()}}
    result.seconds = time.time() - start
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse ``python -m bench.generate``'s command line; a bad one exits 2 with argparse's error."""
    parser = bench_parser("generate", __doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny config, short prompt and cache: a smoke test")
    parser.add_argument("--model", help="model name (default qwen3-0.6b)")
    parser.add_argument("--prompt-len", type=positive_int, help="prompt tokens (default 128)")
    parser.add_argument("--cache-lens", type=positive_int, nargs="+", help="decode cache lengths (default 128 1024)")
    parser.add_argument("--repeat", type=positive_int, help="repeats (prompts; decode steps times --steps)")
    parser.add_argument("--steps", type=positive_int, default=4, help="decode steps per repeat (default 4)")
    parser.add_argument("--passes", type=positive_int,
                        help="passes over every contender; each figure is its best pass's (default 2, quick 1)")
    parser.add_argument("--trials", type=int, default=0, help="measurements per workload for ours (default 0)")
    parser.add_argument("--llama-cpp-dir", help=f"llama.cpp source tree with its converter (default ${llamacpp.ENV})")
    parser.add_argument("--contenders", nargs="+", choices=CONTENDERS, default=list(CONTENDERS),
                        help="which contenders run (default all)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = parser.parse_args(argv)
    if args.trials < 0:
        parser.error(f"--trials must be at least 0, got {args.trials}")
    if args.cache_lens and min(args.cache_lens) < 2:
        parser.error("--cache-lens: a decode step needs at least one earlier token in the cache (length 2 or more)")
    check_model_option(parser, args.model)
    return args


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.generate [--quick] [--json] ...``."""
    args = parse_args(argv)
    result = run(args.quick, args.model, args.prompt_len, tuple(args.cache_lens or ()), args.repeat, args.steps,
                 args.trials, args.llama_cpp_dir, tuple(args.contenders), passes=args.passes)
    if args.quick:
        result.notes.append("Quick mode: the tiny config, a smoke test of the script, not a figure.")
    print_result(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``tune run``: tune a model for a target and write a verified, timed artifact."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Annotated

import typer


def run_command(
    model: Annotated[str, typer.Argument(
        help="A known model name (qwen3-0.6b, qwen3-1.7b, qwen2.5-0.5b, llama-3.2-1b; tiny variants qwen3-tiny, "
        "qwen2.5-tiny, llama-tiny), a Qwen3/Qwen2/Llama config.json, or an .onnx file.")],
    stage: Annotated[str, typer.Option(
        help="prefill (a prompt of --seq-len tokens), prefill-kv (a chunk of --seq-len tokens over a KV cache of "
        "--kv-len) or decode (one token over a KV cache of --kv-len).")] = "prefill",
    seq_len: Annotated[int, typer.Option(
        "--seq-len", help="Prompt (chunk) length in tokens (prefill, prefill-kv).")] = 128,
    kv_len: Annotated[int, typer.Option("--kv-len", help="KV cache length in tokens (prefill-kv, decode).")] = 512,
    layers: Annotated[int, typer.Option(help="Decoder layers to import.")] = 1,
    trials: Annotated[int, typer.Option(
        help="Measurement budget per workload (kernel), the default schedule included; 0 measures nothing and lets the "
        "cost model choose.")] = 64,
    target: Annotated[str | None, typer.Option(
        help='Target as TVM JSON, e.g. \'{"kind": "llvm", "num-cores": 2}\'. Default: this CPU.')] = None,
    tracker: Annotated[str | None, typer.Option(
        help="RPC tracker HOST:PORT to measure through (default: start a local tracker and worker on 127.0.0.1). Env: "
        "TVM_TRACKER_HOST, TVM_TRACKER_PORT.")] = None,
    key: Annotated[str | None, typer.Option(envvar="TVM_TRACKER_KEY", help="RPC key of the device pool.")] = None,
    db: Annotated[str | None, typer.Option(
        envvar="TUNE_DB", help="SQLAlchemy database URL (default: sqlite:///tune.db in this directory).")] = None,
    number: Annotated[int, typer.Option(help="Runs per repeat (raised until a repeat lasts --min-repeat-ms).")] = 1,
    repeat: Annotated[int, typer.Option(help="Repeats per measurement; all are stored.")] = 5,
    min_repeat_ms: Annotated[int, typer.Option("--min-repeat-ms", help="Minimum duration of one repeat in ms.")] = 20,
    cold_bytes: Annotated[int, typer.Option(
        "--cold-bytes", help="Kernels whose arguments after the first take at least this many bytes are timed one call "
        "per repeat, right after a cache flush (0: every kernel).")] = 1 << 20,
    timeout: Annotated[float, typer.Option(help="Seconds allowed for one build and for one run.")] = 60.0,
    max_cv: Annotated[float, typer.Option(
        "--max-cv", help="Coefficient of variation of the repeats above which a measurement is timed again.")] = 0.1,
    device_wait: Annotated[float, typer.Option(
        "--device-wait", help="Seconds a candidate may wait for a free worker (not counted in --timeout).")] = 120.0,
    retries: Annotated[int, typer.Option(
        help="Times a candidate whose worker was lost is retried on another worker.")] = 2,
    candidates: Annotated[int, typer.Option(help="Candidate programs to enumerate from the e-graph.")] = 4,
    reprice: Annotated[bool, typer.Option(
        "--reprice/--no-reprice", help="After tuning, extract once more with each GEMM-like e-node priced by its tuned "
        "kernel, and tune that program too when it is new (off by default for now).")] = False,
    measure_top: Annotated[int, typer.Option(
        "--measure-top", help="Cheapest candidate programs compiled and timed end to end; the fastest is kept.")] = 2,
    retime_default: Annotated[bool, typer.Option(
        "--retime-default", help="Time TVM's untuned default build again, rather than reuse its timing stored by an "
        "earlier run of the same model, stage, shapes and target.")] = False,
    batch_size: Annotated[int, typer.Option(
        "--batch-size", help="Candidates measured between cost-model updates.")] = 8,
    confirm_top: Annotated[int, typer.Option(
        "--confirm-top", help="Fastest candidates per kernel (those within 1.25x of the fastest) measured twice more "
        "once its trials are spent; each counts with its median measurement (0: none).")] = 3,
    peers: Annotated[bool, typer.Option(
        "--peers/--no-peers", envvar="TUNE_PEERS", help="Time torch.compile (Inductor's default mode) and, when "
        "installed, ONNX Runtime beside the tuned program, each in its own process after a check of its outputs "
        "(about 25 s more on a tiny layer, on 2 cores). Env: TUNE_PEERS=0 skips them.")] = True,
    seed: Annotated[int, typer.Option(help="Seed of weights, inputs and the search.")] = 0,
    artifact_dir: Annotated[str, typer.Option(
        "--artifact-dir", help="Where the compiled programs go.")] = "tune-artifacts",
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON object on stdout.")] = False,
    whole_model: Annotated[bool, typer.Option(
        "--whole-model", help="Compile the whole model (embedding, every layer, final norm, LM head) for prefill and "
        "decode at every prompt length up to --max-seq-len into an artifact `tune generate` runs, its kernels tuned "
        "with --trials per workload; --stage, --seq-len, --kv-len and --layers do not apply).")] = False,
    max_seq_len: Annotated[int, typer.Option(
        "--max-seq-len", help="With --whole-model: tokens the KV cache holds (prompt plus new tokens).")] = 512,
    weights: Annotated[str | None, typer.Option(
        "--weights", help="With --whole-model: a local checkpoint directory as save_pretrained writes it (config.json "
        "and *.safetensors) instead of random weights.")] = None,
    weights_dtype: Annotated[str, typer.Option(
        "--weights-dtype", help="Format of the linear weights (q/k/v/o, gate/up/down), quantized by rounding to "
        "nearest when the model loads: float32, bfloat16 (float32 compute), int8 (per output channel, symmetric) or "
        "int4 (group-wise along K, symmetric); norms stay float32.")] = "float32",
    group_size: Annotated[int | None, typer.Option(
        "--group-size", help="With --weights-dtype int4: weights per scale along K, 32 (default) or 128.")] = None,
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q", help="Print nothing but errors and the --json output.")] = False,
) -> None:
    """Tune a model's kernels, compile the fastest program, verify it and time it."""
    if whole_model or weights is not None:
        from measure import MeasureConfig

        from .errors import fail

        if weights_dtype != "float32" or group_size is not None:
            fail("--weights-dtype and --group-size apply to a layer run, not to --whole-model or --weights")

        from .whole import whole_model_command

        config = MeasureConfig(number=number, repeat=repeat, min_repeat_ms=min_repeat_ms, cold_bytes=cold_bytes,
                               timeout_s=timeout, max_cv=max_cv, device_wait_s=device_wait, retries=retries)
        return whole_model_command(
            model, whole_model=whole_model, weights=weights, max_seq_len=max_seq_len, target=target, seed=seed,
            artifact_dir=artifact_dir, as_json=as_json, quiet=quiet, trials=trials, db=db, tracker=tracker, key=key,
            measure_config=config, args={"model": model, "whole_model": True, "weights": weights,
                                         "max_seq_len": max_seq_len, "trials": trials, "seed": seed})
    from tuner.options import RunOptions

    options = RunOptions(  # checks the options before TVM and PyTorch load
        model=model, stage=stage, seq_len=seq_len, kv_len=kv_len, layers=layers, trials=trials,
        target=target, tracker=tracker, key=key, db=db, number=number, repeat=repeat,
        min_repeat_ms=min_repeat_ms, cold_bytes=cold_bytes, timeout_s=timeout, max_candidates=candidates,
        reprice=reprice, measure_top=measure_top, retime_default=retime_default, batch_size=batch_size,
        confirm_top=confirm_top, seed=seed, artifact_dir=artifact_dir, peers=RunOptions.peers if peers else (),
        max_cv=max_cv, device_wait_s=device_wait, retries=retries, weights_dtype=weights_dtype,
        group_size=group_size,
    )
    if tracker is None:
        from measure import tracker_from_env

        env_tracker = tracker_from_env()
        options = dataclasses.replace(options, tracker=str(env_tracker) if env_tracker else None)
    from rich.console import Console

    from tuner.progress import Progress
    from tuner.report import print_summary
    from tuner.session import RunInterrupted, TuneRun

    from .errors import Interrupted

    try:
        summary = TuneRun(options, Progress(quiet=quiet)).run()
    except RunInterrupted as stopped:  # typer would turn it into a bare exit code
        raise Interrupted(str(stopped)) from None
    if as_json:
        sys.stdout.write(json.dumps(summary.as_json()) + "\n")
    elif not quiet:
        console = Console()
        if not console.is_terminal:
            console = Console(width=160)
        print_summary(summary, console)

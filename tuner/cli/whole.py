"""``tune run --whole-model``: the whole model compiled into an artifact that ``tune generate`` runs."""

from __future__ import annotations

import json
import sys

import typer

from .errors import fail


def whole_model_command(model: str, *, whole_model: bool, weights: str | None, max_seq_len: int, target: str | None,
                        seed: int, artifact_dir: str, as_json: bool, quiet: bool, trials: int, db: str | None,
                        tracker: str | None, key: str | None, measure_config, args: dict) -> None:
    """Tune and build the artifact (:func:`tuner.generate.whole.build_whole_model`) and print its summary."""
    if not whole_model:
        fail("--weights needs --whole-model (a single stage is tuned with random weights)")
    if trials < 0:
        fail(f"--trials must be at least 0, got {trials}")
    from measure import tracker_from_env
    from tuner.generate.whole import build_whole_model
    from tuner.progress import Progress
    from tuner.target import resolve_target

    resolved = resolve_target(target, key)
    if tracker is None and (env := tracker_from_env()):
        tracker = str(env)
    tuning = {"db_url": db, "trials": trials, "measure_config": measure_config, "tracker": tracker, "args": args}
    summary = build_whole_model(model, weights_dir=weights, max_len=max_seq_len, seed=seed, target=resolved,
                                artifact_dir=artifact_dir, progress=Progress(quiet=quiet), tuning=tuning)
    if as_json:
        sys.stdout.write(json.dumps(summary.as_json()) + "\n")
        return
    if quiet:
        return
    typer.echo(f"artifact: {summary.artifact} ({summary.build} build, buckets {summary.buckets}, weights: "
               f"{summary.weights})")
    typer.echo(f"import {summary.import_s:.1f} s, compile {summary.compile_s:.1f} s; tuning sessions "
               f"{summary.tuning.get('sessions')}, {len(summary.tuning.get('schedules', []))} kernels")
    for length, t in summary.ttft_s.items():
        typer.echo(f"time to first token, {length} tokens: {t['ours'] * 1e3:.2f} ms "
                   f"(transformers eager {t['eager'] * 1e3:.2f} ms)")
    d = summary.decode_tokens_per_s
    if d["ours"] is not None:
        typer.echo(f"decode: {d['ours']:.1f} tokens/s (transformers eager {d['eager']:.1f})")
    typer.echo("load average: " + " ".join(f"{x:.2f}" for x in summary.load_average))

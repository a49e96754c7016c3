"""``tune generate``: load an artifact and generate tokens after a prompt, with timings."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from .errors import fail


def _parse_ids(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        fail(f"--prompt-ids must be comma-separated integers, got {text!r}")


def generate_command(
    artifact: Annotated[str, typer.Argument(help="An artifact directory written by `tune run --whole-model`.")],
    prompt_len: Annotated[int | None, typer.Option(
        "--prompt-len", help="A prompt of this many random token ids (drawn from --seed).")] = None,
    prompt_ids: Annotated[str | None, typer.Option(
        "--prompt-ids", help="The prompt's token ids, comma-separated, e.g. 9707,11,1879.")] = None,
    new_tokens: Annotated[int, typer.Option("--new-tokens", help="Tokens to generate at most (EOS stops earlier).")]
    = 32,
    sample: Annotated[bool, typer.Option("--sample", help="Sample (seeded by --seed) instead of greedy decoding.")]
    = False,
    temperature: Annotated[float, typer.Option(help="Sampling temperature (with --sample).")] = 1.0,
    top_k: Annotated[int | None, typer.Option("--top-k", help="Sample among the k highest logits (with --sample).")]
    = None,
    seed: Annotated[int, typer.Option(help="Seed of the random prompt and of sampling.")] = 0,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos", help="Generate --new-tokens tokens whatever comes.")]
    = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")] = False,
) -> None:
    """Generate tokens with a compiled model: time to first token, prefill and decode tokens/s, the tokens."""
    if (prompt_len is None) == (prompt_ids is None):
        fail("give exactly one of --prompt-len and --prompt-ids")
    if prompt_len is not None and prompt_len < 1:
        fail(f"--prompt-len must be at least 1, got {prompt_len}")
    import numpy as np

    from tuner.generate import load

    model = load(artifact)
    if prompt_ids is not None:
        ids = _parse_ids(prompt_ids)
    else:
        ids = np.random.default_rng(seed).integers(0, model.vocab_size, prompt_len).tolist()
    model.check_prompt(ids, new_tokens)
    out = model.generate(ids, new_tokens, do_sample=sample, temperature=temperature, top_k=top_k, seed=seed,
                         eos_token_id=None if ignore_eos else -1)
    report = {
        "prompt_len": out.prompt_len, "new_tokens": len(out.tokens), "ttft_s": out.prefill_s,
        "prefill_tokens_per_s": out.prefill_tokens_per_s, "decode_tokens_per_s": out.decode_tokens_per_s,
        "tokens": out.tokens,
    }
    if as_json:
        sys.stdout.write(json.dumps(report) + "\n")
        return
    decode = f"{out.decode_tokens_per_s:.1f}" if out.decode_tokens_per_s else "n/a (one token)"
    typer.echo(f"time to first token: {out.prefill_s * 1e3:.2f} ms ({out.prompt_len} prompt tokens, "
               f"{out.prefill_tokens_per_s:.1f} tokens/s)")
    typer.echo(f"decode: {decode} tokens/s (median over {len(out.decode_s)} steps)")
    typer.echo("tokens: " + ",".join(map(str, out.tokens)))

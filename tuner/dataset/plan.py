"""What ``tune dataset collect`` measures: models, stages and sequence and KV cache lengths.

A :class:`Source` is one imported program (one decoder layer of a built-in model
at one stage and size); its kernels, over the e-graph's candidate programs, are
the workloads measured. :func:`default_plan` spreads the sources so that a short
collection already covers every architecture: the lengths are the outer loop,
the models the inner one.
"""

from __future__ import annotations

from dataclasses import dataclass

#: (stage, seq_len, kv_len) in collection order, lengths in tokens: the cheap shapes first (a decode GEMV
#: measures in microseconds, a 512-token prefill GEMM of a 1B model in tens of milliseconds)
SHAPES = (
    ("decode", 1, 512),
    ("prefill", 32, 512),
    ("decode", 1, 2048),
    ("prefill-kv", 16, 2048),
    ("decode", 1, 128),
    ("prefill", 128, 512),
    ("prefill-kv", 64, 512),
    ("prefill", 512, 512),
)


@dataclass(frozen=True)
class Source:
    """One program whose kernels are measured: a built-in model (one decoder layer) at a stage and size.

    ``seq_len`` and ``kv_len`` are in tokens (``seq_len`` is 1 for decode).
    """

    model: str
    stage: str
    seq_len: int
    kv_len: int

    def label(self) -> str:
        """``model stage seq_len=S kv_len=K`` (the lengths that apply to the stage)."""
        sizes = {"prefill": f"seq_len={self.seq_len}", "decode": f"kv_len={self.kv_len}",
                 "prefill-kv": f"seq_len={self.seq_len} kv_len={self.kv_len}"}[self.stage]
        return f"{self.model} {self.stage} {sizes}"


def default_models() -> list[str]:
    """Every shipped architecture and size but the ``-tiny`` test variants (``extract/configs/``)."""
    from extract.frontend import known_models

    return [m for m in known_models() if not m.endswith("-tiny")]


def default_plan(models: list[str] | None = None) -> list[Source]:
    """Every model of ``models`` (default :func:`default_models`) at every shape of ``SHAPES``, shapes outermost.

    Raises
    ------
    ValueError
        A model that is not a built-in name (the message lists them).
    """
    from extract.frontend import known_models

    chosen = default_models() if not models else list(models)
    unknown = [m for m in chosen if m not in known_models()]
    if unknown:
        raise ValueError(f"unknown model {unknown[0]!r} for --models; built-in models: {', '.join(known_models())}")
    return [Source(m, stage, seq, kv) for stage, seq, kv in SHAPES for m in chosen]

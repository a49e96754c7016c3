"""What ``tune run`` was asked to do, checked before anything heavy is imported.

This module imports nothing but the standard library, so a bad option is
reported in a fraction of a second, before TVM, PyTorch and transformers load.
"""

from __future__ import annotations

from dataclasses import dataclass

WEIGHT_DTYPES = ("float32", "bfloat16", "int8", "int4")
"""``--weights-dtype`` choices (:data:`extract.quant.WEIGHT_DTYPES`, kept equal by a test)."""
GROUP_SIZES = (32, 128)
"""``--group-size`` choices, int4 only (:data:`extract.quant.GROUP_SIZES`)."""
DEFAULT_GROUP_SIZE = 32

PEERS = ("torch_eager", "torch_compile", "torch_compile_max_autotune", "onnxruntime")
"""Every peer's name (:mod:`tuner.peers`), the keys they take in ``tune run --json``'s ``latency_s``."""


class TuneError(RuntimeError):
    """A run that cannot go on (every candidate of a workload failed, a bad option)."""


@dataclass(frozen=True)
class RunOptions:
    """Everything ``tune run`` was asked to do (the CLI's options, with its defaults)."""

    model: str
    stage: str = "prefill"
    seq_len: int = 128
    kv_len: int = 512
    layers: int = 1
    trials: int = 64
    target: str | None = None
    tracker: str | None = None
    key: str | None = None
    db: str | None = None
    number: int = 1
    repeat: int = 5
    min_repeat_ms: int = 20
    cold_bytes: int = 1 << 20
    timeout_s: float = 60.0
    max_cv: float = 0.1
    device_wait_s: float = 120.0
    retries: int = 2
    max_candidates: int = 4
    reprice: bool = False
    measure_top: int = 2
    retime_default: bool = False
    batch_size: int = 8
    confirm_top: int = 3
    seed: int = 0
    artifact_dir: str = "tune-artifacts"
    #: peers timed beside the tuned program (:mod:`tuner.peers`); ``()``: ``--no-peers``; one not installed is skipped
    peers: tuple[str, ...] = ("torch_compile", "onnxruntime")
    #: the linear weights' format (:mod:`extract.quant`); ``group_size`` is int4's (default 32), None for the others
    weights_dtype: str = "float32"
    group_size: int | None = None

    def __post_init__(self) -> None:
        if self.trials < 0:
            raise TuneError(f"--trials must be non-negative (0 measures nothing), got {self.trials}")
        if self.batch_size < 1:
            raise TuneError(f"--batch-size must be at least 1, got {self.batch_size}")
        if self.confirm_top < 0:
            raise TuneError(f"--confirm-top must be non-negative (0 confirms nothing), got {self.confirm_top}")
        if self.max_candidates < 1:
            raise TuneError(f"--candidates must be at least 1, got {self.max_candidates}")
        if self.measure_top < 1:
            raise TuneError(f"--measure-top must be at least 1, got {self.measure_top}")
        if unknown := [p for p in self.peers if p not in PEERS]:
            raise TuneError(f"unknown peer {unknown[0]!r}; expected some of {', '.join(PEERS)}")
        if self.weights_dtype not in WEIGHT_DTYPES:
            raise TuneError(f"unsupported --weights-dtype {self.weights_dtype!r}; expected one of "
                            f"{', '.join(WEIGHT_DTYPES)}")
        if self.group_size is not None and self.weights_dtype != "int4":
            raise TuneError(f"--group-size applies to --weights-dtype int4 only, not {self.weights_dtype}")
        if self.weights_dtype == "int4" and self.group_size is None:
            object.__setattr__(self, "group_size", DEFAULT_GROUP_SIZE)  # int4's default group
        if self.weights_dtype == "int4" and self.group_size not in GROUP_SIZES:
            raise TuneError(f"--group-size must be one of {', '.join(map(str, GROUP_SIZES))}, got {self.group_size}")
        for flag, value in (("--seq-len", self.seq_len), ("--kv-len", self.kv_len), ("--layers", self.layers)):
            if value < 1:
                raise TuneError(f"{flag} must be at least 1, got {value}")

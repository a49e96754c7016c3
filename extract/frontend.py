"""Model import: a Hugging Face architecture built from its config, or an ONNX file, to Relax.

``load_model`` is the entry point (``check_model`` then ``import_model``: a caller that
checks a model before other work, as ``tune run`` does, calls the two itself).  It
returns an :class:`ImportedModel`: a Relax
``IRModule`` whose function ``main`` takes the activations first and the weights after
them (the function attribute ``num_input`` counts the activations), seeded random example
inputs, the weights as NumPy arrays, and hooks to run the same computation in PyTorch
(reference outputs and eager timings) for comparison.

Heavy libraries (torch, transformers, onnx) are imported only when a model is loaded.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tvm

__all__ = [
    "ImportedModel",
    "ModelImportError",
    "ModelSource",
    "STAGES",
    "check_model",
    "known_models",
    "import_model",
    "load_model",
]

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
STAGES = ("prefill", "prefill-kv", "decode")


class ModelImportError(Exception):
    """A model could not be imported; the message is one line saying why."""


@dataclass(frozen=True)
class ImportedModel:
    """A model imported into Relax, with example data and a PyTorch twin.

    Attributes
    ----------
    mod : tvm.IRModule
        Relax module; function ``main`` takes ``inputs`` then ``params``, in that order.
        Its attribute ``num_input`` equals ``len(inputs)``.
    input_names : tuple of str
        Names of the activation parameters of ``main``, in order.
    inputs : tuple of numpy.ndarray
        Seeded random example activations, one per name in ``input_names``.
    params : tuple of numpy.ndarray
        Weights, in the order of ``main``'s parameters after the activations.  Read-only.
    source : str
        Human-readable description, e.g. ``"qwen3-0.6b prefill seq_len=128 layers=1"``.
    model_hash : str
        Hex SHA-256 identifying the model and its shapes (not the random seed).
    flops : int or None
        Floating-point operations of one call (matrix products only, a multiply-add
        counts as 2), or None when unknown.
    param_names : tuple of str
        Names of the weight parameters of ``main``, in order.
    output_names : tuple of str
        Names of the outputs of ``main``, in order.
    """

    mod: tvm.IRModule
    input_names: tuple[str, ...]
    inputs: tuple[np.ndarray, ...]
    params: tuple[np.ndarray, ...]
    source: str
    model_hash: str
    flops: int | None = None
    param_names: tuple[str, ...] = ()
    output_names: tuple[str, ...] = ()
    _torch_call: Callable[[], object] | None = field(default=None, repr=False, compare=False)
    _reference: Callable[[], tuple[np.ndarray, ...] | None] | None = field(
        default=None, repr=False, compare=False
    )

    @property
    def has_torch(self) -> bool:
        """Whether a PyTorch module of the same computation is available (not for ONNX)."""
        return self._torch_call is not None

    def torch_eager(self, repeat: int = 10, warmup: int = 2) -> list[float]:
        """Time the PyTorch eager module on ``inputs``.

        Runs under ``torch.no_grad()`` with torch's default thread count, after
        ``warmup`` untimed calls.

        Parameters
        ----------
        repeat : int
            Number of timed calls.
        warmup : int
            Number of untimed calls first.

        Returns
        -------
        list of float
            Wall-clock seconds of each timed call (take the median).

        Raises
        ------
        NotImplementedError
            When the model has no PyTorch module (an ONNX import).
        """
        if self._torch_call is None:
            raise NotImplementedError(f"no PyTorch module for {self.source}")
        if repeat < 1:
            raise ValueError(f"repeat must be positive, got {repeat}")
        import torch

        times = []
        with torch.no_grad():
            for _ in range(warmup):
                self._torch_call()
            for _ in range(repeat):
                start = time.perf_counter()
                self._torch_call()
                times.append(time.perf_counter() - start)
        return times

    def reference_outputs(self) -> tuple[np.ndarray, ...] | None:
        """Outputs of the reference implementation on ``inputs``.

        PyTorch for a transformers model, ``onnx.reference.ReferenceEvaluator`` for an
        ONNX file.

        Returns
        -------
        tuple of numpy.ndarray or None
            One array per output of ``main``, in order; None when no reference can run.
        """
        return None if self._reference is None else self._reference()


def known_models() -> list[str]:
    """Names of the built-in model configs accepted by :func:`load_model`.

    Returns
    -------
    list of str
        Sorted names, e.g. ``["llama-3.2-1b", "qwen2.5-0.5b", "qwen3-0.6b", ...]``.
    """
    return sorted(p.stem for p in CONFIG_DIR.glob("*.json"))


def load_model(
    name_or_path: str,
    stage: str = "prefill",
    seq_len: int = 128,
    kv_len: int = 512,
    layers: int = 1,
    seed: int = 0,
) -> ImportedModel:
    """Import a model into Relax.

    Parameters
    ----------
    name_or_path : str
        A built-in name (see :func:`known_models`; case and a ``"Qwen/"`` prefix are
        ignored), a path to a transformers ``config.json`` of a supported architecture,
        or a path to an ``.onnx`` file.  Architectures: see :data:`extract.decoder.ARCHITECTURES`.
    stage : {"prefill", "prefill-kv", "decode"}
        ``prefill``: input hidden states float32 ``[1, seq_len, hidden]``; outputs the
        hidden states and, per layer, the new K and V ``[1, kv_heads, seq_len, head_dim]``.
        ``prefill-kv``: a prompt chunk of ``seq_len`` tokens attending (causally) over a
        KV cache of ``kv_len`` tokens: inputs hidden states ``[1, seq_len, hidden]`` and,
        per layer, past K and V ``[1, kv_heads, kv_len, head_dim]``; the chunk sits at
        positions ``kv_len .. kv_len + seq_len - 1``; outputs the hidden states and per
        layer K and V ``[1, kv_heads, kv_len + seq_len, head_dim]``.
        ``decode``: ``prefill-kv`` with one token (``seq_len`` is ignored).
        Ignored for ONNX files.
    seq_len : int
        Prompt (chunk) length in tokens for ``prefill`` and ``prefill-kv``; for ONNX, the
        size given to every dynamic input dimension.
    kv_len : int
        Tokens already in the KV cache for ``prefill-kv`` and ``decode``.
    layers : int
        Number of decoder layers to stack (at most the config's ``num_hidden_layers``).
    seed : int
        Seed of the random weights and example inputs.

    Returns
    -------
    ImportedModel

    Raises
    ------
    ModelImportError
        Unknown name, missing or malformed file, an operator TVM cannot import, a bad
        stage or a non-positive size.
    """
    source = check_model(name_or_path, stage, seq_len, kv_len, layers)
    return import_model(source, stage=stage, seq_len=seq_len, kv_len=kv_len, layers=layers, seed=seed)


def import_model(source: ModelSource, *, stage: str = "prefill", seq_len: int = 128, kv_len: int = 512,
                 layers: int = 1, seed: int = 0) -> ImportedModel:
    """The part of :func:`load_model` after :func:`check_model`: build, export and import the model.

    ``source`` is what ``check_model`` returned for the same stage and sizes (a
    caller that checked the model early passes it on instead of reading the file again).

    Raises
    ------
    ModelImportError
        As :func:`load_model`, for what only building and importing the model finds.
    """
    if source.kind == "onnx":
        from . import onnx_import

        return onnx_import.load_onnx(source.path, seq_len=int(seq_len), seed=seed)
    from . import decoder

    return decoder.load_decoder(
        source.path,
        source.label,
        source.config,
        stage=stage,
        seq_len=int(seq_len),
        kv_len=int(kv_len),
        layers=int(layers),
        seed=seed,
    )


@dataclass(frozen=True)
class ModelSource:
    """What a model argument names: ``kind`` ``"onnx"`` or ``"config"``, the file, a short label,
    and for a config the file's checked contents (``extract.config.read_config``)."""

    kind: str
    path: Path
    label: str
    config: dict | None = None


def check_model(name_or_path: str, stage: str = "prefill", seq_len: int = 128, kv_len: int = 512,
                layers: int = 1) -> ModelSource:
    """The checks of :func:`load_model` that need no torch, transformers or TVM import: seconds, not minutes.

    Checks the stage and sizes, resolves a built-in name or a path, and reads and
    checks a config file (``extract.config``). ``tune run`` calls it before it opens
    the tuning database, so a mistyped model creates nothing.

    Raises
    ------
    ModelImportError
        As :func:`load_model`, for everything short of building and importing the model.
    """
    if stage not in STAGES:
        raise ModelImportError(f"unknown stage {stage!r}; expected one of: {', '.join(STAGES)}")
    for arg, value in (("seq_len", seq_len), ("kv_len", kv_len), ("layers", layers)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value <= 0:
            raise ModelImportError(f"{arg} must be a positive integer, got {value!r}")
    text = str(name_or_path)
    lowered = text.lower()
    if lowered.endswith(".onnx"):
        if not Path(text).is_file():
            raise ModelImportError(f"ONNX file not found: {text}")
        return ModelSource("onnx", Path(text), Path(text).stem)
    if lowered.endswith(".json"):
        path = Path(text)
        if not path.is_file():
            raise ModelImportError(f"config file not found: {text}")
        label = path.stem
    else:
        key = lowered.rsplit("/", 1)[-1]
        path = CONFIG_DIR / f"{key}.json"
        if key not in known_models():
            raise ModelImportError(
                f"unknown model {text!r}; known models: {', '.join(known_models())}"
                " (or give a path to an .onnx file or a config .json)"
            )
        label = key
    from .config import check_sizes, read_config, stage_tokens

    config = read_config(path)
    check_sizes(config, path, int(layers), sum(stage_tokens(stage, int(seq_len), int(kv_len))))
    return ModelSource("config", path, label, config)


def stable_hash(*parts: object) -> str:
    """Hex SHA-256 of JSON-serialisable parts (bytes are hashed as they are)."""
    digest = hashlib.sha256()
    for part in parts:
        data = part if isinstance(part, bytes) else json.dumps(part, sort_keys=True).encode()
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


# A traceback's header or frame line inside an error message (Python's or TVM's C++ frames).
_TRACEBACK_LINE = re.compile(r'\s*(Traceback\b|File "|\d+: |\[bt\] )')


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (two if the first ends in a colon)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if lines[0].endswith(":") and len(lines) > 1:  # "...of node:" then the detail
        return f"{lines[0]} {lines[1]}"
    return lines[0]


def message_line(exc: BaseException) -> str:
    """An exception's whole message as one line, or its type's name when it has none.

    The message's lines are joined with spaces, traceback header and frame lines left out.
    """
    lines = [line.strip() for line in str(exc).splitlines() if line.strip() and not _TRACEBACK_LINE.match(line)]
    return " ".join(lines) if lines else type(exc).__name__


def readonly(array: np.ndarray) -> np.ndarray:
    """A read-only view of ``array``."""
    view = array.view()
    view.flags.writeable = False
    return view


def operator_error(importer: str, exc: Exception) -> ModelImportError:
    """A one-line ModelImportError for an importer failure, naming the operator if known."""
    message = message_line(exc)
    match = re.search(
        r"(?:Unsupported function types|not supported for frontend \w+:)\s*(.+)", message
    )
    if match:
        ops = re.sub(r"[\[\]']", "", match.group(1)).strip()
        return ModelImportError(f"{importer} does not support operator(s): {ops}")
    return ModelImportError(f"{importer} failed: {message}")

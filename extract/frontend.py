"""Model import: a Hugging Face architecture built from its config, or an ONNX file, to Relax.

``load_model`` is the entry point (``check_model`` then ``import_model``: a caller that
checks a model before other work, as ``tune run`` does, calls the two itself).  It
returns an :class:`ImportedModel`: a Relax
``IRModule`` whose function ``main`` takes the activations first and the weights after
them (the function attribute ``num_input`` counts the activations), seeded random example
inputs, the weights as NumPy arrays, and hooks to run the same computation in PyTorch
(reference outputs and eager timings) for comparison.

Heavy libraries (torch, transformers, onnx) are imported only when a model is loaded:
:func:`import_model` imports :mod:`extract.decoder` or :mod:`extract.onnx_import` then.
The model's types and the importers' shared helpers are in :mod:`extract.imported`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .config import check_sizes, read_config, stage_tokens
from .imported import ImportedModel, ModelImportError

__all__ = [
    "STAGES",
    "ImportedModel",
    "ModelImportError",
    "ModelSource",
    "check_model",
    "import_model",
    "known_models",
    "load_model",
    "torch_module",
]

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
STAGES = ("prefill", "prefill-kv", "decode")


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

        return onnx_import.load_onnx(source.path, seq_len=int(seq_len), seed=seed, label=source.label)
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


def torch_module(source: ModelSource, *, stage: str = "prefill", seq_len: int = 128, kv_len: int = 512,
                 layers: int = 1, seed: int = 0):
    """The PyTorch module of a config model and its example inputs, without the Relax import.

    The same weights and inputs as :func:`import_model` with the same arguments
    (:func:`extract.decoder.build_decoder`). Returns ``(module, arrays)``: a
    ``torch.nn.Module`` whose ``forward(hidden_states, **past)`` returns the hidden
    states and the KV cache, and the float32 inputs by name, ``hidden_states`` first.

    Raises
    ------
    ModelImportError
        For an ONNX file (it has no PyTorch module), or as :func:`import_model`.
    """
    if source.kind == "onnx":
        raise ModelImportError(f"{source.label} is an ONNX file: it has no PyTorch module")
    from . import decoder

    return decoder.build_decoder(source.path, source.config, stage=stage, seq_len=int(seq_len), kv_len=int(kv_len),
                                 layers=int(layers), seed=seed)


@dataclass(frozen=True)
class ModelSource:
    """What a model argument names: ``kind`` ``"onnx"`` or ``"config"``, the file, a label
    (a file path as given, or a built-in name), and for a config the file's checked contents
    (``extract.config.read_config``)."""

    kind: str
    path: Path
    label: str
    config: dict | None = None

    @property
    def content_hash(self) -> str:
        """Hex SHA-256 of the file's bytes: the same for every spelling of one file's path,
        different for two files of one name and different contents."""
        return file_hash(self.path)


def file_hash(path: Path | str) -> str:
    """Hex SHA-256 of a file's bytes (``OSError`` if it cannot be read)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def builtin_config(name: str) -> Path | None:
    """The shipped config a built-in model name names (case and a ``"Qwen/"`` prefix ignored), else None."""
    key = str(name).lower().rsplit("/", 1)[-1]
    return CONFIG_DIR / f"{key}.json" if key in known_models() else None


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
        return ModelSource("onnx", Path(text), text)
    if lowered.endswith(".json"):
        path = Path(text)
        if not path.is_file():
            raise ModelImportError(f"config file not found: {text}")
        label = text  # the path as given: two files named config.json stay apart
    else:
        key = lowered.rsplit("/", 1)[-1]
        path = CONFIG_DIR / f"{key}.json"
        if key not in known_models():
            raise ModelImportError(
                f"unknown model {text!r}; known models: {', '.join(known_models())}"
                " (or give a path to an .onnx file or a config .json)"
            )
        label = key
    config = read_config(path)
    check_sizes(config, path, int(layers), sum(stage_tokens(stage, int(seq_len), int(kv_len))))
    return ModelSource("config", path, label, config)



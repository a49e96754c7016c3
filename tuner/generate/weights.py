"""The model's weights: a local checkpoint as ``save_pretrained`` writes it, or seeded random ones.

A checkpoint directory holds ``config.json`` and either one ``model.safetensors`` or
shards listed by ``model.safetensors.index.json``; they are read with the safetensors
library (torch tensors, so bfloat16 checkpoints read too) and converted to float32.
Every weight the architecture needs must be there with the shape its config implies;
``lm_head.weight`` may be absent when the config ties the word embeddings.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from extract import ModelImportError
from extract.config import read_config

__all__ = ["expected_shapes", "make_config", "random_weights", "read_checkpoint"]

INDEX = "model.safetensors.index.json"


def make_config(data: dict, path: Path | str):
    """The transformers config of ``data`` (a checked ``config.json`` read from ``path``).

    Raises
    ------
    extract.ModelImportError
        When transformers refuses a value (one line naming the file).
    """
    from extract.decoder import ARCHITECTURES

    try:
        return ARCHITECTURES[data["model_type"]][0](**data)
    except Exception as exc:  # transformers and huggingface_hub raise many types for a bad value
        raise ModelImportError(f"bad {data['model_type']} config {path}: {type(exc).__name__}: "
                               f"{str(exc).strip().splitlines()[-1]}") from None


def expected_shapes(config) -> dict[str, tuple[int, ...]]:
    """Checkpoint name -> shape of every weight of ``config``'s causal LM (tied ``lm_head`` left out)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


def _shard_files(directory: Path) -> list[Path]:
    index = directory / INDEX
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ModelImportError(f"malformed {index}: {type(exc).__name__}: {exc}") from None
        files = [directory / name for name in names]
        missing = [f for f in files if not f.is_file()]
        if missing:
            raise ModelImportError(f"checkpoint shard missing: {missing[0]} (listed in {INDEX})")
        return files
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ModelImportError(f"no .safetensors file in {directory} (save the model with save_pretrained)")
    return files


def read_checkpoint(directory: Path | str) -> tuple[dict, dict[str, np.ndarray]]:
    """The config (checked as :func:`extract.config.read_config` does) and float32 weights of a checkpoint.

    Returns
    -------
    (dict, dict)
        The ``config.json`` contents, and checkpoint name -> float32 array.

    Raises
    ------
    extract.ModelImportError
        No such directory, no or bad ``config.json``, no ``.safetensors`` file, a shard missing,
        a truncated or corrupt file, or weights that do not match the config (a weight missing,
        or of another shape).
    """
    import torch
    from safetensors import SafetensorError, safe_open

    directory = Path(directory)
    if not directory.is_dir():
        raise ModelImportError(f"checkpoint directory not found: {directory}")
    if not (directory / "config.json").is_file():
        raise ModelImportError(f"checkpoint {directory} has no config.json")
    data = read_config(directory / "config.json")
    config = make_config(data, directory / "config.json")
    weights: dict[str, np.ndarray] = {}
    for file in _shard_files(directory):
        try:
            with safe_open(str(file), framework="pt") as f:
                for name in f.keys():  # noqa: SIM118 - safe_open has keys(), no iteration
                    weights[name] = f.get_tensor(name).to(torch.float32).numpy()
        except (SafetensorError, OSError, RuntimeError) as exc:
            raise ModelImportError(f"truncated or corrupt safetensors file {file}: {exc}") from None
    expected = expected_shapes(config)
    missing = [n for n in expected if n not in weights]
    if missing:
        raise ModelImportError(f"checkpoint {directory} does not match its config: {len(missing)} weight(s) missing, "
                               f"e.g. {missing[0]}")
    for name, shape in expected.items():
        if weights[name].shape != shape:
            raise ModelImportError(f"checkpoint {directory} does not match its config: {name} has shape "
                                   f"{list(weights[name].shape)}, the config implies {list(shape)}")
    if config.tie_word_embeddings:
        weights.pop("lm_head.weight", None)
    return data, {n: weights[n] for n in expected}


def random_weights(config, seed: int) -> dict[str, np.ndarray]:
    """Seeded random float32 weights of the whole model under their checkpoint names.

    Drawn as :func:`extract.decoder.load_decoder` draws a layer's (matrices normal with
    ``initializer_range``, norm scales near one, biases near zero); with tied word
    embeddings there is no ``lm_head.weight``.
    """
    from transformers import AutoModelForCausalLM

    from extract.decoder import random_init

    model = AutoModelForCausalLM.from_config(config).float()  # float32 whatever the config's torch_dtype
    random_init(model, config.initializer_range, seed)
    return {name: param.detach().numpy().copy() for name, param in model.named_parameters()}

"""Load an artifact directory into a :class:`GeneratingModel`: TVM's runtime and numpy only.

``load(path)`` checks the manifest and every file's SHA-256 (:mod:`tuner.generate.manifest`),
refuses an artifact compiled for another CPU, sets TVM's thread count to the physical
cores as the tuner does (:func:`measure.threads.use_physical_cores`), loads each compiled
program, and prepares each layer's weights once (``transform_weights``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from measure.threads import use_physical_cores

from .manifest import ArtifactError, check_cpu, read_manifest
from .runtime import GeneratingModel, Program

__all__ = ["load"]

EMBEDDING = "model.embed_tokens.weight"


def _read_weights(path: Path) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as exc:
        raise ArtifactError(f"unreadable weights file {path}: {exc}") from None


def load(path: Path | str, *, check_target: bool = True) -> GeneratingModel:
    """The model of the artifact directory ``path``, ready to generate.

    Raises
    ------
    ArtifactError
        Missing or malformed manifest, a missing or edited file, a CPU other than the
        one compiled for (unless ``check_target`` is False), or a weight the programs
        need that the weights file lacks.
    """
    use_physical_cores()  # before the first TVM kernel starts the thread pool
    import tvm
    from tvm import relax

    from measure.tvmapi import host_cpu

    path = Path(path)
    manifest = read_manifest(path)
    if check_target:
        check_cpu(manifest, host_cpu())
    weights = _read_weights(path / manifest.weights_file)
    if EMBEDDING not in weights:
        raise ArtifactError(f"{manifest.weights_file} lacks {EMBEDDING}")
    if "lm_head.weight" not in weights:  # tied word embeddings
        weights["lm_head.weight"] = weights[EMBEDDING]
    device = tvm.cpu()
    layers = int(manifest.config["num_hidden_layers"])
    programs, prepared = {}, {}
    for entry in manifest.programs:
        vm = relax.VirtualMachine(tvm.runtime.load_module(str(path / entry.library)), device)
        programs[(entry.program, entry.tokens, entry.cache)] = Program(
            entry.program, entry.tokens, entry.cache, vm["main"], entry.weights_key)
        key = (entry.program, entry.weights_key)
        if key in prepared:
            continue
        per_layer = []
        for layer in range(layers if entry.program != "head" else 1):
            names = [n.replace("{layer}", str(layer)) for n in entry.weights]
            missing = [n for n in names if n not in weights]
            if missing:
                raise ArtifactError(f"{manifest.weights_file} lacks {missing[0]}")
            raw = [tvm.runtime.tensor(weights[n], device) for n in names]
            per_layer.append(list(vm["transform_weights"](*raw)) if entry.prepared else raw)
        prepared[key] = per_layer
    return GeneratingModel(manifest.config, programs, prepared, weights[EMBEDDING], manifest.max_len,
                           tuple(manifest.buckets), device)

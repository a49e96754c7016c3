"""Compile the programs of a whole model at every bucket and write the artifact directory.

Each (program, shape) of :func:`tuner.generate.buckets.program_shapes` is exported
(:func:`extract.programs.export_program`), its weight-only work lifted into
``transform_weights`` (:func:`tuner.compile.prepare_weights`, run once per layer when
the artifact is loaded) and compiled by ``compile_program``: TVM's default build unless
the caller passes one that puts tuned kernels in place. The float32 weights go into
``weights.safetensors`` under their checkpoint names.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tvm

from extract.programs import ProgramSpec, export_program
from measure.tvmapi import host_cpu, target_json

from ..compile import _LIFTED, build_default, export, prepare_weights, prepared_inputs
from .buckets import default_buckets, program_shapes
from .manifest import Manifest, ProgramEntry, write_manifest

__all__ = ["WEIGHTS_FILE", "build_artifact", "export_shapes"]

WEIGHTS_FILE = "weights.safetensors"


def _versions() -> dict:
    out = {}
    for package in ("apache-tvm", "torch", "transformers", "numpy", "safetensors"):
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            out[package] = None
    return out


def _weights_key(mod: tvm.IRModule) -> str:
    """The same for two prepared modules whose weight preparation is the same (SHA-256 of its script)."""
    names = [gv.name_hint for gv in mod.get_global_vars()]
    text = mod[_LIFTED].script() if _LIFTED in names else "unprepared"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def export_shapes(config, buckets: tuple[int, ...], progress=None) -> tuple[dict, float]:
    """Every (program, tokens, cache) of ``buckets`` exported and its weight work lifted.

    Returns ``({(program, tokens, cache): (ProgramSpec, prepared module)}, seconds)``.
    """
    start = time.perf_counter()
    shapes = program_shapes(tuple(buckets))
    out = {}
    for i, (program, tokens, cache) in enumerate(shapes):
        if progress is not None:
            progress.note(f"importing {program} tokens={tokens} cache={cache} ({i + 1}/{len(shapes)})")
        spec = export_program(config, program, tokens, cache)
        out[(program, tokens, cache)] = (spec, prepare_weights(spec.mod))
    return out, time.perf_counter() - start


def build_artifact(
    directory: Path | str, *, model: str, config, config_data: dict, weights: dict[str, np.ndarray],
    weights_source: str, target: tvm.target.Target, max_len: int, buckets: tuple[int, ...] | None = None,
    shapes: dict | None = None, compile_program: Callable[[ProgramSpec, tvm.IRModule], object] | None = None,
    tuning: dict | None = None, progress=None,
) -> tuple[Path, dict[str, float]]:
    """Compile every program at every bucket and write the artifact to ``directory`` (replaced if present).

    Parameters
    ----------
    config : transformers.PretrainedConfig
        The model's config; ``config_data`` is the same as a dict (stored in the manifest).
    weights : dict
        float32 arrays under checkpoint names (``model.embed_tokens.weight``, ...).
    max_len : int
        Tokens the KV cache holds (prompt plus new tokens); at most ``max_position_embeddings``.
    buckets : tuple of int, optional
        Default: :func:`tuner.generate.buckets.default_buckets` of ``max_len``.
    shapes : dict, optional
        What :func:`export_shapes` returned for these buckets (default: exported here).
    compile_program : callable, optional
        ``(spec, prepared module) -> relax.Executable``; default: TVM's default build.
    tuning : dict, optional
        ``{"sessions": [...], "schedules": [...]}`` recorded in the manifest.

    Returns
    -------
    (Path, dict)
        The directory, and seconds spent importing and compiling (``import_s``, ``compile_s``).

    Raises
    ------
    ValueError
        ``max_len`` outside ``1..max_position_embeddings``.
    """
    if not 1 <= max_len <= config.max_position_embeddings:
        raise ValueError(f"maximum length {max_len} outside 1..{config.max_position_embeddings} "
                         "(the config's max_position_embeddings)")
    from safetensors.numpy import save_file

    buckets = tuple(buckets or default_buckets(max_len))
    timings = {"import_s": 0.0, "compile_s": 0.0}
    if shapes is None:
        shapes, timings["import_s"] = export_shapes(config, buckets, progress)
    directory = Path(directory)
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    compile_program = compile_program or (lambda _spec, mod: build_default(mod, target))
    entries = []
    start = time.perf_counter()
    for i, ((program, tokens, cache), (spec, prepared)) in enumerate(shapes.items()):
        if progress is not None:
            progress.note(f"compiling {program} tokens={tokens} cache={cache} ({i + 1}/{len(shapes)})")
        library = f"{program}-n{tokens}-L{cache}.so"
        export(compile_program(spec, prepared), str(directory / library))
        entries.append(ProgramEntry(program, tokens, cache, library, list(spec.input_names),
                                    list(spec.weight_names), prepared_inputs(prepared) is not None,
                                    _weights_key(prepared)))
    timings["compile_s"] = time.perf_counter() - start
    save_file({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in weights.items()},
              str(directory / WEIGHTS_FILE))
    manifest = Manifest(
        model=model, config=config_data, target=target_json(target), cpu=str(target.attrs.get("mcpu", host_cpu())),
        max_len=max_len, buckets=list(buckets), programs=entries, weights_file=WEIGHTS_FILE,
        weights_source=weights_source, versions=_versions(),
        tuning=tuning or {"sessions": [], "schedules": []},
    )
    write_manifest(directory, manifest)
    return directory, timings

"""The artifact's manifest: what the directory holds, what it was built from, and its checks.

``manifest.json`` names the model and its config, the target, the maximum length and
buckets, every compiled program (file, shape, inputs, weight names), the weights file,
the tuning sessions and schedules the kernels came from, the versions of the tools,
and the SHA-256 of every other file in the directory. :func:`read_manifest` refuses a
directory whose files are missing or edited, and :func:`check_cpu` one built for
another CPU, each with a one-line :class:`ArtifactError`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["MANIFEST", "ArtifactError", "Manifest", "ProgramEntry", "check_cpu", "file_sha256", "read_manifest",
           "write_manifest"]

MANIFEST = "manifest.json"
FORMAT = 1


class ArtifactError(ValueError):
    """An artifact directory that cannot be used; the message is one line saying why."""


@dataclass(frozen=True)
class ProgramEntry:
    """One compiled program at one shape: ``library`` (file name in the directory) whose ``main``
    takes ``inputs`` then the weights ``weights`` (checkpoint names, ``{layer}`` for the layer
    index), prepared first by its ``transform_weights`` when ``prepared``. ``weights_key`` is
    the same for every shape of a program whose weight preparation is the same."""

    program: str
    tokens: int
    cache: int
    library: str
    inputs: list[str]
    weights: list[str]
    prepared: bool
    weights_key: str


@dataclass(frozen=True)
class Manifest:
    """The contents of ``manifest.json`` (see the module docstring)."""

    model: str
    config: dict
    target: str
    cpu: str
    max_len: int
    buckets: list[int]
    programs: list[ProgramEntry]
    weights_file: str
    weights_source: str
    versions: dict
    tuning: dict = field(default_factory=lambda: {"sessions": [], "schedules": []})
    files: dict = field(default_factory=dict)
    format: int = FORMAT

    def as_json(self) -> dict:
        """Plain JSON values."""
        return asdict(self)


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes, read in 16 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(directory: Path, manifest: Manifest) -> Path:
    """Write ``manifest.json`` with the SHA-256 of every other file in ``directory``; returns its path."""
    files = {p.name: file_sha256(p) for p in sorted(directory.iterdir()) if p.is_file() and p.name != MANIFEST}
    data = dict(manifest.as_json(), files=files)
    path = directory / MANIFEST
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return path


def read_manifest(directory: Path | str) -> Manifest:
    """The manifest of an artifact directory, after checking every file it records.

    Raises
    ------
    ArtifactError
        No such directory, no or malformed ``manifest.json``, another format, a file the
        manifest records missing or with other contents, or a program file it does not record.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise ArtifactError(f"artifact directory not found: {directory}")
    path = directory / MANIFEST
    try:
        data = json.loads(path.read_text())
        if data.get("format") != FORMAT:
            raise ArtifactError(f"{path}: format {data.get('format')!r}, this version reads format {FORMAT}")
        manifest = Manifest(**{k: v for k, v in data.items() if k != "programs"},
                            programs=[ProgramEntry(**p) for p in data["programs"]])
    except FileNotFoundError:
        raise ArtifactError(f"{directory} is not an artifact: it has no {MANIFEST}") from None
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        if isinstance(exc, ArtifactError):
            raise
        raise ArtifactError(f"malformed {path}: {type(exc).__name__}: {exc}") from None
    needed = {e.library for e in manifest.programs} | {manifest.weights_file}
    unrecorded = sorted(needed - set(manifest.files))
    if unrecorded:
        raise ArtifactError(f"{path} records no hash for {', '.join(unrecorded)}")
    for name, digest in sorted(manifest.files.items()):
        file = directory / name
        if not file.is_file():
            raise ArtifactError(f"artifact file missing: {file}")
        if file_sha256(file) != digest:
            raise ArtifactError(f"artifact file edited or corrupt: {file} (its SHA-256 differs from the manifest's)")
    return manifest


def check_cpu(manifest: Manifest, host_cpu: str) -> None:
    """Refuse an artifact compiled for another CPU than ``host_cpu`` (LLVM's name, e.g. ``znver4``).

    Raises
    ------
    ArtifactError
        The manifest's CPU differs: its code may use instructions this CPU lacks.
    """
    if manifest.cpu != host_cpu:
        raise ArtifactError(f"the artifact was compiled for CPU {manifest.cpu!r} (target {manifest.target}); this "
                            f"CPU is {host_cpu!r}: run `tune run` for this machine")

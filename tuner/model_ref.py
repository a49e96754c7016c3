"""A model as sessions record it, and a ``--model`` argument resolved to the model hashes it names.

``tune run`` records each session's model by the display source and program hash of
the imported model, and in the session's arguments by the model argument as given
(``model``) and the SHA-256 of the model file (``model_content_hash``): two files
named ``config.json`` with different contents are two models.

:func:`resolve_model` reads a ``--model`` argument as any of: the model as given to
``tune run`` or its recorded source (every stage and size of it); a file path, in any
spelling (its content hash is compared); a built-in name such as ``qwen3-tiny`` (the
shipped config's content hash); a model hash; a prefix of a model or content hash of
at least :data:`MIN_PREFIX` hex digits.
"""

from __future__ import annotations

import re
from pathlib import Path

from database.recorded import CONTENT_HASH_ARG, RecordedModel
from extract.frontend import ModelSource, builtin_config, file_hash

MIN_PREFIX = 8
_HEX = re.compile(r"[0-9a-f]+")


class ModelLookupError(ValueError):
    """A ``--model`` argument that names no recorded model, or a hash prefix that names several."""


def record_session(db, args: dict, source: ModelSource, model) -> int:
    """Start ``model``'s session in ``db``, as ``tune run`` does, and return its id.

    ``args`` are the run's arguments (``model``: the argument as given); the file's
    content hash is added to them.  ``model`` is the imported model (its ``source`` and
    ``model_hash``).  Raises ``OSError`` if the model file can no longer be read.
    """
    return db.start_session({**args, CONTENT_HASH_ARG: source.content_hash}, model.source, model.model_hash)


def resolve_model(models: list[RecordedModel], text: str) -> set[str]:
    """The model hashes of ``models`` that ``text`` names (see the module docstring).

    Raises
    ------
    ModelLookupError
        Nothing matches (the message lists the known models), a hash prefix matches
        several models (it lists them), or a hex string too short to be a hash prefix.
    """
    content = _content_hash(text)
    hashes = {m.model_hash for m in models if m.model_hash == text or m.given == text or m.source == text
              or m.source.startswith(text + " ") or (content and m.content_hash == content)}
    if hashes:
        return hashes
    prefix = text.lower()
    if _HEX.fullmatch(prefix):
        if len(prefix) < MIN_PREFIX:
            raise ModelLookupError(f"--model {text}: a hash prefix needs at least {MIN_PREFIX} hex digits")
        named: dict[str, str] = {}  # full hash -> a model's name
        for m in models:
            for full in (m.content_hash, m.model_hash):
                if full.startswith(prefix):
                    named.setdefault(full, m.name)
        if len(named) > 1:
            listed = ", ".join(f"{full[:16]} ({name})" for full, name in sorted(named.items()))
            raise ModelLookupError(f"--model {text} is ambiguous: it begins {listed}")
        if named:
            full = next(iter(named))
            return {m.model_hash for m in models if full in (m.content_hash, m.model_hash)}
    raise ModelLookupError(f"no model matches --model {text}; known models: {known_names(models)}")


def known_names(models: list[RecordedModel]) -> str:
    """The recorded models, one entry each (name and a short hash), for an error message."""
    names = sorted({f"{m.name} ({(m.content_hash or m.model_hash)[:MIN_PREFIX + 4]})" for m in models})
    return ", ".join(names) or "none (no session recorded a model)"


def _content_hash(text: str) -> str:
    """The content hash of the file ``text`` names (a path, or a built-in name), else ""."""
    path = Path(text)
    if not path.is_file():
        path = builtin_config(text) if not text.lower().endswith((".json", ".onnx")) else None
    try:
        return file_hash(path) if path is not None else ""
    except OSError:
        return ""

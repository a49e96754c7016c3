"""A transformers ``config.json``, read and checked before torch or transformers is imported.

``tune run CONFIG.json`` checks the file with :func:`read_config` and :func:`check_sizes`
before it opens the tuning database or imports the model, so a bad file costs seconds
and leaves nothing behind. A size the file does not state would silently take the
library's default (Qwen3's 32 KV heads and ``head_dim`` 128, whatever the other sizes):
a different model from the one meant, so those sizes are required.
"""

from __future__ import annotations

import json
from pathlib import Path

from .imported import ModelImportError, message_line

#: ``model_type`` values with a decoder in ``extract.decoder.ARCHITECTURES`` (same order)
ARCHITECTURE_NAMES = ("qwen3", "qwen2", "llama")
#: what every config file must state (every published config.json of these architectures does)
REQUIRED = ("model_type", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads")
#: required as well, per architecture: Qwen3Config's default head_dim (128) is not derived from the sizes
REQUIRED_BY_TYPE = {"qwen3": ("head_dim",)}
#: sizes that must be positive integers where given
POSITIVE = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
            "num_hidden_layers", "max_position_embeddings", "vocab_size")


def read_config(path: Path) -> dict:
    """The config at ``path`` as a dict, checked: a supported ``model_type`` and positive integer sizes.

    Raises
    ------
    ModelImportError
        Unreadable or malformed JSON, not an object, an unsupported or missing
        ``model_type``, a missing required size, or a size that is not a positive integer.
    """
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ModelImportError(f"malformed config file {path}: {message_line(exc)}") from exc
    if not isinstance(data, dict):
        raise ModelImportError(f"malformed config file {path}: not a JSON object")
    model_type = data.get("model_type")
    if "model_type" in data and (not isinstance(model_type, str) or model_type not in ARCHITECTURE_NAMES):
        raise ModelImportError(
            f"unsupported architecture {model_type!r} in {path}; supported: {', '.join(ARCHITECTURE_NAMES)}"
        )
    missing = [key for key in REQUIRED + REQUIRED_BY_TYPE.get(model_type, ()) if key not in data]
    if missing:
        raise ModelImportError(
            f"config {path} lacks {', '.join(missing)}: give the model's full config.json "
            "(a missing value would silently take the library default: a different model)"
        )
    for key in POSITIVE:
        value = data.get(key)
        if key in data and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise ModelImportError(f"bad {model_type} config {path}: {key} must be a positive integer, got {value!r}")
    return data


def check_sizes(data: dict, path: Path, layers: int, positions: int) -> None:
    """Check that ``layers`` decoder layers and ``positions`` token positions fit the config ``data``.

    Only sizes the file states are checked here; the library's defaults are checked
    when the model is built.

    Raises
    ------
    ModelImportError
        ``layers`` above ``num_hidden_layers`` or ``positions`` above ``max_position_embeddings``.
    """
    if "num_hidden_layers" in data and layers > data["num_hidden_layers"]:
        raise ModelImportError(f"layers={layers} exceeds the model's num_hidden_layers={data['num_hidden_layers']}")
    if "max_position_embeddings" in data and positions > data["max_position_embeddings"]:
        raise ModelImportError(
            f"{positions} positions exceed max_position_embeddings={data['max_position_embeddings']}"
        )


def stage_tokens(stage: str, seq_len: int, kv_len: int) -> tuple[int, int]:
    """Tokens a stage processes and tokens already in the KV cache, for one call.

    ``prefill``: ``(seq_len, 0)``; ``prefill-kv``: ``(seq_len, kv_len)``; ``decode``:
    ``(1, kv_len)``.  Each query attends over ``past + new`` keys.
    """
    return {"prefill": (seq_len, 0), "prefill-kv": (seq_len, kv_len), "decode": (1, kv_len)}[stage]


def dtype_note(data: dict) -> str | None:
    """A note when the config asks for weights in a dtype other than float32, else None.

    The layers are built and tuned in float32 whatever ``torch_dtype`` (or ``dtype``)
    says, until low-bit weights are supported.
    """
    dtype = data.get("torch_dtype") or data.get("dtype")
    if dtype in (None, "float32"):
        return None
    return (f"the config's torch_dtype {dtype} is not used: layers are tuned in float32 "
            "until low-bit weights are supported")

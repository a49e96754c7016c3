"""Decoder layers of a transformers architecture built from its config, exported to Relax.

Supported architectures (``model_type`` of the config): ``qwen3``, ``qwen2`` (Qwen2.5:
Q/K/V projections with bias) and ``llama`` (Llama 3.x, including its ``llama3`` rotary
scaling).  The PyTorch side is transformers' own code: the architecture's
``*DecoderLayer`` blocks, rotary embeddings from its ``*RotaryEmbedding`` computed inside
the graph, the causal mask from ``create_causal_mask`` and the KV-cache update through a
transformers ``Cache``.  The cache is passed in and out as explicit tensors
(``StaticCache``'s in-place update does not import into TVM's torch frontend), so the
exported function is pure.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from pathlib import Path

import numpy as np
import torch
import tvm
from transformers import LlamaConfig, PretrainedConfig, Qwen2Config, Qwen3Config
from transformers.cache_utils import Cache, DynamicLayer
from transformers.masking_utils import create_causal_mask
from transformers.models.llama.modeling_llama import (
    LlamaDecoderLayer,
    LlamaRotaryEmbedding,
)
from transformers.models.qwen2.modeling_qwen2 import (
    Qwen2DecoderLayer,
    Qwen2RotaryEmbedding,
)
from transformers.models.qwen3.modeling_qwen3 import (
    Qwen3DecoderLayer,
    Qwen3RotaryEmbedding,
)

from .config import ARCHITECTURE_NAMES, check_sizes, stage_tokens
from .imported import (
    ImportedModel,
    ModelImportError,
    message_line,
    operator_error,
    readonly,
    stable_hash,
)

__all__ = ["ARCHITECTURES", "DecoderLayers", "build_decoder", "decoder_flops", "load_decoder"]

ARCHITECTURES: dict[str, tuple[type, type, type]] = {
    "qwen3": (Qwen3Config, Qwen3DecoderLayer, Qwen3RotaryEmbedding),
    "qwen2": (Qwen2Config, Qwen2DecoderLayer, Qwen2RotaryEmbedding),
    "llama": (LlamaConfig, LlamaDecoderLayer, LlamaRotaryEmbedding),
}
"""``model_type`` -> (config class, decoder layer class, rotary embedding class)."""
assert tuple(ARCHITECTURES) == ARCHITECTURE_NAMES  # extract.config checks model_type without importing torch

# The Relax graph uses explicit matmul + mask + softmax; PyTorch timings use SDPA,
# transformers' default, so the eager baseline is the one a user would get.
EXPORT_ATTENTION = "eager"
TIMING_ATTENTION = "sdpa"


class _ExplicitKVLayer(DynamicLayer):
    """A ``DynamicLayer`` whose first write keeps the given tensors as they are.

    ``DynamicLayer`` starts from an empty 1-D tensor and concatenates onto it; TVM's
    ``concat`` rejects operands of different rank, so the first write skips that step.
    Later writes are transformers' own concatenation along the sequence axis.
    """

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.device = key_states.device
            self.keys, self.values = key_states, value_states
            self.is_initialized = True
            return self.keys, self.values
        return super().update(key_states, value_states, *args, **kwargs)


class DecoderLayers(torch.nn.Module):
    """``layers`` decoder layers with in-graph rotary embeddings and causal mask.

    ``forward(hidden_states, **past)`` takes float32 hidden states ``[1, seq, hidden]``
    and optionally ``past_key_{i}``/``past_value_{i}`` ``[1, kv_heads, past, head_dim]``
    for every layer ``i``; the new tokens sit at positions ``past .. past + seq - 1``.
    It returns ``(hidden_states, key_0, value_0, key_1, ...)`` where each key/value is
    ``[1, kv_heads, past + seq, head_dim]``.
    """

    def __init__(self, config: PretrainedConfig, layers: int):
        super().__init__()
        _, layer_cls, rotary_cls = ARCHITECTURES[config.model_type]
        self.config = config
        self.layers = torch.nn.ModuleList(layer_cls(config, i) for i in range(layers))
        self.rotary_emb = rotary_cls(config)

    def forward(
        self, hidden_states: torch.Tensor, **past: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        cache = Cache(layers=[_ExplicitKVLayer() for _ in self.layers])
        start = 0
        if past:
            for i, layer in enumerate(cache.layers):
                layer.update(past[f"past_key_{i}"], past[f"past_value_{i}"])
            start = past["past_key_0"].shape[2]
        position_ids = torch.arange(start, start + hidden_states.shape[1]).unsqueeze(0)
        mask = create_causal_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=None,
            cache=cache,
            position_ids=position_ids,
        )
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for layer in self.layers:
            hidden_states = layer(
                hidden_states,
                attention_mask=mask,
                position_ids=position_ids,
                cache=cache,
                use_cache=True,
                position_embeddings=position_embeddings,
            )
        outputs = [hidden_states]
        for layer in cache.layers:
            outputs += [layer.keys, layer.values]
        return tuple(outputs)


def head_dim(config: PretrainedConfig) -> int:
    """Per-head size: the config's ``head_dim``, else ``hidden_size // num_attention_heads``."""
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def decoder_flops(config: PretrainedConfig, layers: int, new_tokens: int, attended: int) -> int:
    """Matrix-product FLOPs of ``layers`` decoder layers (a multiply-add counts as 2).

    Parameters
    ----------
    config : transformers.PretrainedConfig
        A config of one of :data:`ARCHITECTURES`.
    layers : int
    new_tokens : int
        Tokens processed in this call (``seq_len`` for prefill, 1 for decode).
    attended : int
        Keys each query is scored against (the full, unmasked score matrix is computed).

    Returns
    -------
    int
    """
    hidden, inter, hd = config.hidden_size, config.intermediate_size, head_dim(config)
    q, kv = config.num_attention_heads * hd, config.num_key_value_heads * hd
    projections = 2 * new_tokens * hidden * (q + 2 * kv) + 2 * new_tokens * q * hidden
    mlp = 2 * new_tokens * hidden * inter * 3
    attention = 2 * 2 * new_tokens * attended * q
    return layers * (projections + mlp + attention)


def random_init(module: torch.nn.Module, std: float, seed: int) -> None:
    """Seeded random weights in place: matrices normal with ``std`` (the config's
    ``initializer_range``), RMSNorm scales near one and biases near zero, not all equal."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            if param.ndim >= 2:
                param.normal_(0.0, std, generator=generator)
            else:
                param.normal_(1.0 if "norm" in name else 0.0, 0.1, generator=generator)


# The first part of every model hash (kept from the first, Qwen3-only version of this
# module, so hashes of models recorded then stay the same).
_HASH_TAG = "qwen3"


@contextlib.contextmanager
def _quiet_transformers():
    """transformers' own log lines off (a bad rope_scaling logs one before it raises), restored after."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def build_decoder(
    path: Path, data: dict, *, stage: str, seq_len: int, kv_len: int, layers: int, seed: int
) -> tuple[DecoderLayers, dict[str, np.ndarray]]:
    """The seeded PyTorch decoder layers and example inputs of :func:`load_decoder`, without the export.

    Returns ``(module, arrays)``: ``module`` in eval mode, float32, its attention
    implementation set for the export (``"eager"``; callers that time it set
    ``module.config._attn_implementation = "sdpa"``, transformers' default), and
    ``arrays`` the float32 inputs by name (``hidden_states``, then ``past_key_{i}``,
    ``past_value_{i}`` per layer for the stages with a KV cache). The same ``seed``
    gives the same weights and inputs as :func:`load_decoder`.

    Raises
    ------
    ModelImportError
        A config transformers refuses or sizes beyond the config's limits.
    """
    config_cls = ARCHITECTURES[data["model_type"]][0]

    def bad_config(exc: Exception) -> ModelImportError:
        return ModelImportError(f"bad {config_cls.model_type} config {path}: {type(exc).__name__}: {message_line(exc)}")

    try:
        with _quiet_transformers():
            config = config_cls(**data)
    except Exception as exc:  # transformers and huggingface_hub raise many types for a bad value
        raise bad_config(exc) from exc
    config._attn_implementation = EXPORT_ATTENTION
    new_tokens, past = stage_tokens(stage, seq_len, kv_len)
    check_sizes({"num_hidden_layers": config.num_hidden_layers,
                 "max_position_embeddings": config.max_position_embeddings}, path, layers, past + new_tokens)
    try:
        with _quiet_transformers():
            module = DecoderLayers(config, layers).float().eval()
    except Exception as exc:  # e.g. an unknown hidden_act or rope_scaling type
        raise bad_config(exc) from exc

    random_init(module, config.initializer_range, seed)

    rng = np.random.default_rng(seed)
    arrays = {
        "hidden_states": rng.standard_normal((1, new_tokens, config.hidden_size), np.float32)
    }
    kv_shape = (1, config.num_key_value_heads, past, head_dim(config))
    for i in range(layers if past else 0):
        arrays[f"past_key_{i}"] = rng.standard_normal(kv_shape, np.float32)
        arrays[f"past_value_{i}"] = rng.standard_normal(kv_shape, np.float32)
    return module, arrays


def load_decoder(
    path: Path, label: str, data: dict, *, stage: str, seq_len: int, kv_len: int, layers: int, seed: int
) -> ImportedModel:
    """Build, export and import decoder layers; see :func:`extract.frontend.load_model`.

    ``data`` is the config file at ``path`` as :func:`extract.config.read_config` returned it.
    """
    module, arrays = build_decoder(path, data, stage=stage, seq_len=seq_len, kv_len=kv_len, layers=layers,
                                   seed=seed)
    config = module.config
    new_tokens, past = stage_tokens(stage, seq_len, kv_len)
    shapes = {"prefill": {"seq_len": seq_len}, "decode": {"kv_len": kv_len}}.get(
        stage, {"seq_len": seq_len, "kv_len": kv_len}
    )
    shape_text = " ".join(f"{k}={v}" for k, v in shapes.items())
    tensors = {name: torch.from_numpy(a) for name, a in arrays.items()}
    hidden = tensors.pop("hidden_states")

    mod, param_names, params = _export(module, hidden, tensors)
    input_names = tuple(arrays)
    num_input = int(mod["main"].attrs["num_input"])
    if num_input != len(input_names):
        raise ModelImportError(
            f"internal: {num_input} activations imported, expected {len(input_names)}"
        )

    output_names = ("hidden_states",) + tuple(
        f"{kind}_{i}" for i in range(layers) for kind in ("key", "value")
    )

    def call() -> tuple[torch.Tensor, ...]:
        return module(hidden, **tensors)

    def timed_call() -> tuple[torch.Tensor, ...]:
        config._attn_implementation = TIMING_ATTENTION
        try:
            return call()
        finally:
            config._attn_implementation = EXPORT_ATTENTION

    @functools.cache
    def reference() -> tuple[np.ndarray, ...]:
        with torch.no_grad():
            return tuple(readonly(out.numpy().copy()) for out in call())

    return ImportedModel(
        mod=mod,
        input_names=input_names,
        inputs=tuple(readonly(a) for a in arrays.values()),
        params=params,
        source=f"{label} {stage} {shape_text} layers={layers}",
        model_hash=stable_hash(_HASH_TAG, data, stage, shapes, layers),
        flops=decoder_flops(config, layers, new_tokens, past + new_tokens),
        param_names=param_names,
        output_names=output_names,
        _torch_call=timed_call,
        _reference=reference,
    )


def _export(
    module: torch.nn.Module, hidden: torch.Tensor, past: dict[str, torch.Tensor]
) -> tuple[tvm.IRModule, tuple[str, ...], tuple[np.ndarray, ...]]:
    """torch.export ``module`` and import it with weights as function parameters."""
    from tvm.relax.frontend.torch import from_exported_program

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            program = torch.export.export(module, (hidden,), past).run_decompositions()
        except Exception as exc:
            raise ModelImportError(f"torch.export failed: {message_line(exc)}") from exc
        try:
            mod = from_exported_program(
                program, keep_params_as_input=True, run_ep_decomposition=False
            )
        except Exception as exc:
            raise operator_error("TVM's torch importer", exc) from exc

    kind = torch.export.graph_signature.InputKind.PARAMETER
    specs = [s for s in program.graph_signature.input_specs if s.kind is kind]
    params = tuple(readonly(module.get_parameter(s.target).detach().numpy()) for s in specs)
    func = mod["main"]
    names = tuple(p.name for p in func.params[len(func.params) - len(params) :])
    if len(func.params) - int(func.attrs["num_input"]) != len(params):
        raise ModelImportError(
            "internal: weight parameters of the Relax function do not match the module"
        )
    # The weights live in ImportedModel.params; a copy in the module would double memory.
    mod["main"] = func.without_attr("params")
    return mod, names, params

"""The whole model split at attention into three programs that one runtime chains.

A decoder layer cannot be one program when the KV cache is written in place: the new
keys and values must land in the cache before attention reads it. So each layer runs
as two programs, and the model ends with a third:

* ``attn_in`` (program A): input RMSNorm, Q/K/V projections (with bias for qwen2),
  per-head q/k norms (qwen3), rotary embedding at the given positions. Inputs
  ``hidden_states [1, n, hidden]`` float32 and ``position_ids [1, n]`` int64; outputs
  ``query [1, heads, n, head_dim]``, ``key [n, kv_heads, head_dim]`` and
  ``value [n, kv_heads, head_dim]`` (token-major, the KV cache's layout).
* ``attn_out`` (program B): attention of the queries over the cache prefix with an
  additive mask, o_proj, residual add, post-attention RMSNorm, MLP, residual add.
  Inputs ``query``, ``hidden_states`` (the residual), ``key_cache`` and
  ``value_cache [L, kv_heads, head_dim]`` and ``mask [1, 1, n, L]`` float32 (0 where
  a query may attend, the float32 minimum elsewhere, as transformers builds it);
  output ``hidden_states [1, n, hidden]``.
* ``head`` (program C): final RMSNorm and LM head on one token:
  ``hidden_states [1, 1, hidden]`` -> ``logits [1, 1, vocab]``.

The weights are parameters of each program, so one compiled program serves every
layer (the runtime passes each layer's weights). The modules are transformers' own
submodules (names and numerics as transformers has them), exported with
``torch.export`` and imported with TVM's Relax frontend as :mod:`extract.decoder` does,
so the e-graph rules that match a decoder layer match these programs too.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import torch
import tvm
from transformers import PretrainedConfig

from .decoder import ARCHITECTURES, EXPORT_ATTENTION, _export, head_dim

__all__ = ["PROGRAMS", "ProgramSpec", "export_program", "layer_weight_name"]

PROGRAMS = ("attn_in", "attn_out", "head")
"""Names of the programs of a whole model, in the order a layer runs them (the head last)."""


def _modeling(config: PretrainedConfig):
    """The transformers ``modeling_*`` module of ``config``'s architecture."""
    return importlib.import_module(ARCHITECTURES[config.model_type][1].__module__)


def _submodules(source: torch.nn.Module, names: tuple[str, ...]) -> torch.nn.Module:
    """A module holding only ``source``'s submodules at the dotted ``names`` (same names),
    so that the exported program takes the weights it uses and no others."""
    holder = torch.nn.Module()
    for dotted in names:
        parent = holder
        *path, leaf = dotted.split(".")
        for part in path:
            if not hasattr(parent, part):
                parent.add_module(part, torch.nn.Module())
            parent = getattr(parent, part)
        parent.add_module(leaf, source.get_submodule(dotted))
    return holder


class AttentionInput(torch.nn.Module):
    """Program A of one decoder layer (see the module docstring) from transformers' ``layer``."""

    def __init__(self, config: PretrainedConfig, layer: torch.nn.Module):
        super().__init__()
        names = ["input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"]
        if hasattr(layer.self_attn, "q_norm"):
            names += ["self_attn.q_norm", "self_attn.k_norm"]
        self.layer = _submodules(layer, tuple(names))
        self.rotary_emb = ARCHITECTURES[config.model_type][2](config)
        self._rotate = _modeling(config).apply_rotary_pos_emb
        self._head_dim = head_dim(config)

    def forward(self, hidden_states: torch.Tensor, position_ids: torch.Tensor):
        attn = self.layer.self_attn
        x = self.layer.input_layernorm(hidden_states)
        shape = (*x.shape[:-1], -1, self._head_dim)
        q, k = attn.q_proj(x).view(shape), attn.k_proj(x).view(shape)
        if hasattr(attn, "q_norm"):
            q, k = attn.q_norm(q), attn.k_norm(k)
        v = attn.v_proj(x).view(shape)
        cos, sin = self.rotary_emb(x, position_ids)
        q, k = self._rotate(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
        return q, k.transpose(1, 2)[0], v[0]


class AttentionOutput(torch.nn.Module):
    """Program B of one decoder layer (see the module docstring) from transformers' ``layer``."""

    def __init__(self, config: PretrainedConfig, layer: torch.nn.Module):
        super().__init__()
        self.layer = _submodules(layer, ("self_attn.o_proj", "post_attention_layernorm", "mlp"))
        self.layer.self_attn.num_key_value_groups = layer.self_attn.num_key_value_groups
        self._scaling = layer.self_attn.scaling
        self._attention = _modeling(config).eager_attention_forward

    def forward(self, query, hidden_states, key_cache, value_cache, mask):
        key = key_cache.permute(1, 0, 2).unsqueeze(0)
        value = value_cache.permute(1, 0, 2).unsqueeze(0)
        out, _ = self._attention(self.layer.self_attn, query, key, value, mask, scaling=self._scaling)
        out = self.layer.self_attn.o_proj(out.reshape(*hidden_states.shape[:-1], -1))
        hidden_states = hidden_states + out
        return hidden_states + self.layer.mlp(self.layer.post_attention_layernorm(hidden_states))


class Head(torch.nn.Module):
    """Program C (see the module docstring): final norm and LM head."""

    def __init__(self, config: PretrainedConfig):
        super().__init__()
        norm_cls = getattr(_modeling(config), ARCHITECTURES[config.model_type][1].__name__.replace(
            "DecoderLayer", "RMSNorm"))
        self.norm = norm_cls(config.hidden_size, eps=config.rms_norm_eps)
        self.lm_head = torch.nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, hidden_states):
        return self.lm_head(self.norm(hidden_states))


@dataclass(frozen=True)
class ProgramSpec:
    """One program at one shape, imported into Relax.

    ``mod``'s ``main`` takes ``input_names`` then the weights named ``weight_names``
    (checkpoint names, with ``{layer}`` standing for the layer index in ``attn_in`` and
    ``attn_out``: see :func:`layer_weight_name`). ``tokens`` is ``n``, ``cache`` is ``L``
    (``attn_out`` only, else 0).
    """

    program: str
    tokens: int
    cache: int
    mod: tvm.IRModule
    input_names: tuple[str, ...]
    weight_names: tuple[str, ...]


def layer_weight_name(template: str, layer: int) -> str:
    """The checkpoint name of a weight template of ``attn_in``/``attn_out`` for ``layer``
    (e.g. ``model.layers.{layer}.mlp.up_proj.weight``)."""
    return template.replace("{layer}", str(layer))


def _example_inputs(config: PretrainedConfig, program: str, tokens: int, cache: int) -> dict[str, torch.Tensor]:
    hidden, hd = config.hidden_size, head_dim(config)
    heads, kv = config.num_attention_heads, config.num_key_value_heads
    if program == "attn_in":
        return {"hidden_states": torch.zeros(1, tokens, hidden), "position_ids": torch.arange(tokens).unsqueeze(0)}
    if program == "attn_out":
        return {"query": torch.zeros(1, heads, tokens, hd), "hidden_states": torch.zeros(1, tokens, hidden),
                "key_cache": torch.zeros(cache, kv, hd), "value_cache": torch.zeros(cache, kv, hd),
                "mask": torch.zeros(1, 1, tokens, cache)}
    return {"hidden_states": torch.zeros(1, 1, hidden)}


def export_program(config: PretrainedConfig, program: str, tokens: int = 1, cache: int = 0) -> ProgramSpec:
    """Export ``program`` (one of :data:`PROGRAMS`) at ``tokens`` new tokens over ``cache`` cached ones.

    The module is built with zero-initialised weights of ``config`` (float32); only its
    structure is exported, the weights are the program's parameters.

    Raises
    ------
    extract.ModelImportError
        When torch.export or TVM's importer fails.
    ValueError
        An unknown program, or ``attn_out`` without a cache length of at least ``tokens``.
    """
    if program not in PROGRAMS:
        raise ValueError(f"unknown program {program!r}; expected one of {', '.join(PROGRAMS)}")
    if program == "attn_out" and cache < tokens:
        raise ValueError(f"attn_out needs a cache of at least {tokens} rows, got {cache}")
    config._attn_implementation = EXPORT_ATTENTION
    layer_cls = ARCHITECTURES[config.model_type][1]
    if program == "head":
        module = Head(config)
        rename = {"norm.": "model.norm.", "lm_head.": "lm_head."}
    else:
        cls = AttentionInput if program == "attn_in" else AttentionOutput
        module = cls(config, layer_cls(config, 0))
        rename = {"layer.": "model.layers.{layer}."}
    module = module.float().eval()
    inputs = _example_inputs(config, program, tokens, cache if program == "attn_out" else 0)
    first, *rest = inputs
    mod, relax_names, _ = _export(module, inputs[first], {k: inputs[k] for k in rest})
    torch_names = [name for name, _ in module.named_parameters()]
    if list(relax_names) != ["p_" + name.replace(".", "_") for name in torch_names]:
        raise ValueError(f"internal: the weights imported for {program} ({', '.join(relax_names)}) are not the "
                         f"module's ({', '.join(torch_names)})")
    weight_names = []
    for name in torch_names:
        prefix = next(p for p in rename if name.startswith(p))
        weight_names.append(rename[prefix] + name[len(prefix):])
    return ProgramSpec(program, tokens, cache if program == "attn_out" else 0, mod, tuple(inputs),
                       tuple(weight_names))

"""Identical decoder layers of a Relax ``main``, found so each distinct one is explored once.

A model of ``L`` decoder layers repeats one computation ``L`` times with other weights
(and, for ``prefill-kv``/``decode``, other KV-cache inputs).  :func:`split_layers` cuts
``main``'s bindings into

- the *prologue*: bindings that depend on no layer (rotary tables, the causal mask);
- one *segment* per layer: a function of its free values (the previous layer's hidden
  state, prologue values, its weights) returning the values other parts use;
- the *epilogue*: the output tuple.

Layers are told apart by the weight parameters' names (``p_layers_3_mlp_...``: any name
with ``layers_<i>_`` or ``layers.<i>.``), which only guides the cut: the hidden state
entering layer ``i + 1`` is the earliest value of layer ``i`` that layer ``i + 1`` reads,
and a binding belongs to the latest layer whose entering hidden state it depends on
(bindings that read only a layer's weights, such as weight transposes, go to that layer).
Two segments are *identical* when their bindings are equal up to renaming, parameters and
outputs in order (a canonical form compared with TVM's structural equality), so
``segment_i(args_i) == representative(args_i)`` holds exactly; names never decide it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import tvm
from tvm import relax

from measure.tvmapi import ffi_convert, structural_equal, structural_hash

__all__ = ["Layer", "LayerGroup", "LayerSplit", "split_layers"]

_LAYER_NAME = re.compile(r"(?:^|[._])layers?[._](\d+)(?:[._]|$)")
_PROLOGUE = -1


@dataclass(frozen=True)
class Layer:
    """One layer of the split program: which representative computes it, on what.

    Attributes
    ----------
    group : int
        Index into :attr:`LayerSplit.groups` of the identical representative.
    args : tuple of relax.Var
        Values of ``main`` passed to the representative's parameters, in order.
    outputs : tuple of relax.Var
        Variables of ``main`` bound to the representative's outputs, in order.
    """

    group: int
    args: tuple[Any, ...]
    outputs: tuple[Any, ...]


@dataclass(frozen=True)
class LayerGroup:
    """A distinct layer: a module whose ``main`` is the layer as a function.

    Attributes
    ----------
    mod : tvm.IRModule
        ``main`` takes the layer's activations (``attrs["num_input"]`` of them) then its
        weights, and returns a tuple of its outputs; the original module's other
        functions are kept.
    members : tuple of int
        Positions of the layers (in :attr:`LayerSplit.layers`) that this group computes.
    """

    mod: tvm.IRModule
    members: tuple[int, ...]


@dataclass(frozen=True)
class LayerSplit:
    """``main`` cut into prologue, layers and epilogue (see the module docstring).

    Attributes
    ----------
    mod : tvm.IRModule
        The module split.
    prologue, epilogue : tuple of relax.Binding
        ``main``'s own bindings before the first and after the last layer.
    layers : tuple of Layer
        In program order.
    groups : tuple of LayerGroup
        The distinct layers, in order of first appearance.
    """

    mod: tvm.IRModule
    prologue: tuple[Any, ...]
    layers: tuple[Layer, ...]
    epilogue: tuple[Any, ...]
    groups: tuple[LayerGroup, ...]


def split_layers(mod: tvm.IRModule) -> LayerSplit | None:
    """Cut ``mod["main"]`` into layers and group the identical ones.

    Parameters
    ----------
    mod : tvm.IRModule
        Relax module with ``main`` (weights as parameters after ``num_input``).

    Returns
    -------
    LayerSplit or None
        None when ``main`` does not have at least two layers of named weights, is not a
        sequence of plain bindings, or cannot be cut into consecutive layers.
    """
    func = mod["main"] if "main" in mod else None
    if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
        return None
    attrs = func.attrs or {}
    num_input = int(attrs["num_input"]) if "num_input" in attrs else len(func.params)
    if num_input < 1:
        return None
    bindings = [b for block in func.body.blocks for b in block.bindings]
    if not all(isinstance(b, relax.VarBinding | relax.MatchCast) for b in bindings):
        return None
    weights = set(func.params[num_input:])
    named = {
        p: int(m.group(1))
        for p in func.params[num_input:]
        if (m := _LAYER_NAME.search(p.name)) is not None
    }
    rank = {index: r for r, index in enumerate(sorted(set(named.values())))}
    if len(rank) < 2:
        return None
    deps = [_free_vars(b.value) for b in bindings]
    weight_layer = {p: rank[i] for p, i in named.items()}
    epilogue = _epilogue(bindings, deps)
    entries = _layer_entries(func, bindings, deps, weight_layer, epilogue)
    if entries is None:
        return None
    segment = _segments(func, bindings, deps, entries, weight_layer, epilogue, len(rank))
    return _build(mod, func, bindings, deps, segment, weights, len(rank))


def _free_vars(expr: Any) -> list[Any]:
    """Variables ``expr`` reads, once each, in order of first appearance."""
    return list(dict.fromkeys(relax.analysis.free_vars(expr)))


def _layer_entries(
    func: Any, bindings: list, deps: list[list], weight_layer: dict[Any, int], epilogue: set[int]
) -> list[Any] | None:
    """The hidden state entering each layer: the first parameter, then per layer ``i + 1``
    the earliest value depending on layer ``i``'s weights that layer ``i + 1`` reads."""
    up = dict.fromkeys(func.params, -1) | weight_layer
    position = {}
    layers = max(weight_layer.values()) + 1
    entering: list[Any] = [None] * layers
    for pos, (b, used) in enumerate(zip(bindings, deps, strict=True)):
        mine = max((up.get(v, -1) for v in used), default=-1)
        up[b.var] = mine
        position[b.var] = pos
        for v in used if pos not in epilogue else ():
            if mine >= 1 and up.get(v, -1) == mine - 1 and v in position:
                best = entering[mine]
                if best is None or position[v] < position[best]:
                    entering[mine] = v
    entering[0] = func.params[0]
    return None if any(e is None for e in entering) else entering


def _segments(
    func: Any,
    bindings: list,
    deps: list[list],
    entries: list[Any],
    weight_layer: dict[Any, int],
    epilogue: set[int],
    layers: int,
) -> list[int]:
    """Per binding: its layer, :data:`_PROLOGUE`, or ``layers`` for the epilogue."""
    enters = {v: i for i, v in enumerate(entries)}
    key = {p: enters.get(p, _PROLOGUE) for p in func.params}
    segment = []
    for b, used in zip(bindings, deps, strict=True):
        mine = max((key.get(v, _PROLOGUE) for v in used), default=_PROLOGUE)
        if mine == _PROLOGUE:  # reads no hidden state: a layer's weight work, or the prologue
            mine = max((weight_layer.get(v, _PROLOGUE) for v in used), default=_PROLOGUE)
        segment.append(mine)
        key[b.var] = enters.get(b.var, mine)
    return [layers if pos in epilogue else seg for pos, seg in enumerate(segment)]


def _epilogue(bindings: list, deps: list[list]) -> set[int]:
    """Positions of the output tuples: tuple bindings read only by the return value or
    by each other."""
    users: dict[Any, list[int]] = {}
    for pos, used in enumerate(deps):
        for v in used:
            users.setdefault(v, []).append(pos)
    found: set[int] = set()
    for pos in range(len(bindings) - 1, -1, -1):
        b = bindings[pos]
        if isinstance(b.value, relax.Tuple) and all(u in found for u in users.get(b.var, [])):
            found.add(pos)
    return found


@dataclass
class _Segment:
    bindings: list = field(default_factory=list)
    params: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    num_input: int = 0
    content: Any = None


def _build(
    mod: tvm.IRModule,
    func: Any,
    bindings: list,
    deps: list[list],
    segment: list[int],
    weights: set,
    layers: int,
) -> LayerSplit | None:
    seg_of = {b.var: s for b, s in zip(bindings, segment, strict=True)}
    outside: set = set(_free_vars(func.body.body))
    for b, used in zip(bindings, deps, strict=True):
        outside.update(v for v in used if seg_of.get(v, _PROLOGUE) != seg_of[b.var])
    parts = [_Segment() for _ in range(layers)]
    for b, used, s in zip(bindings, deps, segment, strict=True):
        if 0 <= s < layers:
            part = parts[s]
            part.bindings.append(b)
            part.params.extend(v for v in used if seg_of.get(v, _PROLOGUE) != s)
            if b.var in outside:
                part.outputs.append(b.var)
    groups: list[tuple[int, _Segment, list[int]]] = []
    layer_list = []
    for index, part in enumerate(parts):
        if not part.bindings or not part.outputs:
            return None
        params = list(dict.fromkeys(part.params))
        acts = [p for p in params if p not in weights]
        part.params, part.num_input = acts + [p for p in params if p in weights], len(acts)
        part.content = ffi_convert(_canonical(part))
        digest = structural_hash(part.content, map_free_vars=True)
        for g, (other_digest, other, members) in enumerate(groups):  # noqa: B007 - g is read after the loop
            if other_digest == digest and structural_equal(
                other.content, part.content, map_free_vars=True
            ):
                members.append(index)
                break
        else:
            g = len(groups)
            groups.append((digest, part, [index]))
        layer_list.append(Layer(g, tuple(part.params), tuple(part.outputs)))
    others = {gv: f for gv, f in mod.functions_items() if gv.name_hint != "main"}
    return LayerSplit(
        mod=mod,
        prologue=tuple(b for b, s in zip(bindings, segment, strict=True) if s == _PROLOGUE),
        layers=tuple(layer_list),
        epilogue=tuple(b for b, s in zip(bindings, segment, strict=True) if s == layers),
        groups=tuple(
            LayerGroup(_module(part, func, others), tuple(members)) for _, part, members in groups
        ),
    )


def _canonical(part: _Segment) -> list:
    """The segment with its variables replaced by their positions: equal for identical
    layers whatever their names and weights."""
    names: dict[Any, str] = {p: f"$p{i}" for i, p in enumerate(part.params)}
    content: list = [part.num_input, [p.ty for p in part.params]]
    for b in part.bindings:
        value = _encode(b.value, names)
        if isinstance(b, relax.MatchCast):
            value = ["match_cast", b.ty, value]
        content.append([value, b.var.ty])
        names[b.var] = f"$v{len(names)}"
    content.append([names[v] for v in part.outputs])
    return content


def _encode(expr: Any, names: dict[Any, str]) -> Any:
    if isinstance(expr, tvm.ir.Var):
        return names[expr]
    if isinstance(expr, tvm.ir.Tuple):
        return ["tuple", [_encode(f, names) for f in expr.fields]]
    if isinstance(expr, tvm.ir.TupleGetItem):
        return ["item", _encode(expr.tuple_value, names), int(expr.index)]
    if isinstance(expr, tvm.ir.Call):
        args = [_encode(a, names) for a in expr.args]
        return ["call", expr.op, expr.attrs, list(expr.ty_args), args]
    return expr


def _module(part: _Segment, func: Any, others: dict) -> tvm.IRModule:
    """The segment as ``main`` of a module (its parameters are ``main``'s variables)."""
    body = relax.SeqExpr([relax.DataflowBlock(part.bindings)], relax.Tuple(part.outputs))
    ret_ty = relax.TupleType([v.ty for v in part.outputs])
    layer = relax.Function(part.params, body, ret_ty, is_pure=bool(func.is_pure))
    layer = layer.with_attr("num_input", part.num_input)
    return tvm.IRModule({**others, tvm.ir.GlobalVar("main"): layer})

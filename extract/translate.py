"""Relax function -> one :class:`~extract.lang.Tensor` term, plus the side tables.

Every binding of ``main`` becomes a term; terms are hash-consed, so the three identical
``reshape(lv15, [8, 64])`` of a decoder layer are one node.  Calls that the language has
a constructor for become that constructor; every other call becomes ``Tensor.opaque``
whose key is a content hash of the call without its tensor arguments (operator,
attributes, static arguments), so identical calls share a key and a node, and the key
is stable from one run to the next.  :mod:`extract.lowering` reads the side tables back.
Two patterns are recognised on the way: a ``broadcast_to`` to its argument's own static
shape is that argument, and the ``expand_dims`` / ``broadcast_to`` / ``reshape`` chain
of grouped-query attention's head repeat is one ``repeat_heads`` node.

Only dataflow-style functions are supported: bindings of calls, tuples, tuple items,
constants and aliases (``If`` and nested functions raise :class:`UnsupportedProgram`).
All calls are taken to be pure, which holds for the graphs the Relax frontends emit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import tvm
from egglog import ActionLike, String, Vec, i64, set_
from tvm import relax

from measure.tvmapi import ffi_convert, structural_equal, structural_hash, tirx

from . import lang
from .lang import Tensor

__all__ = ["Hole", "OpaqueSpec", "Translation", "UnsupportedProgram", "translate"]

# Weights that are constants are ordered after every parameter.
_CONST_ORDER_BASE = 1 << 40


class UnsupportedProgram(ValueError):
    """The Relax function uses a construct the term language cannot represent."""


@dataclass(frozen=True)
class Hole:
    """Position of the ``index``-th tensor argument in an :class:`OpaqueSpec` template."""

    index: int


@dataclass(frozen=True)
class OpaqueSpec:
    """A Relax call with its tensor arguments taken out.

    Attributes
    ----------
    op : tvm.ir.Expr
        The callee (an ``Op``, ``GlobalVar`` or ``ExternFunc``).
    args : tuple
        Template of the arguments: :class:`Hole` where a tensor argument goes, a tuple of
        templates for a ``relax.Tuple`` argument, the original expression otherwise.
    attrs : tvm.ir.Attrs or None
        The call attributes.
    ty_args : tuple of tvm.ir.Type
        The call's type arguments (``call_tir`` output types and similar).
    match_cast : tvm.ir.Type or None
        Set when the node is a ``MatchCast`` binding instead of a call: the type matched.
    """

    op: Any
    args: tuple
    attrs: Any
    ty_args: tuple
    match_cast: Any = None


@dataclass
class Translation:
    """The term of a Relax ``main`` and what is needed to turn terms back into Relax.

    Attributes
    ----------
    mod : tvm.IRModule
        The module translated (its other functions are kept when lowering).
    root : Tensor
        Term of the function's output (a ``make_tuple`` when it returns a tuple).
    param_names : tuple of str
        Names used in ``Tensor.var`` for ``main``'s parameters, in signature order.
    consts : dict of str to tvm.ir.Expr
        Leaves by key: constants, shapes, primitive values.
    opaques : dict of str to OpaqueSpec
        Opaque calls by key.
    facts : list
        egglog actions that set ``shape``, ``dtype`` and ``order`` of translated values.
    fact_values : list of (Tensor, str, object)
        The same facts as Python values, ``(term, "shape" | "dtype" | "order", value)``
        (a tuple of ints, a dtype string, an int), to check the e-graph against.
    """

    mod: tvm.IRModule = field(repr=False)
    root: Tensor = field(repr=False)
    param_names: tuple[str, ...]
    consts: dict[str, Any] = field(default_factory=dict, repr=False)
    opaques: dict[str, OpaqueSpec] = field(default_factory=dict, repr=False)
    facts: list[ActionLike] = field(default_factory=list, repr=False)
    fact_values: list[tuple[Tensor, str, Any]] = field(default_factory=list, repr=False)

    @property
    def function(self) -> relax.Function:
        """The translated ``main`` function."""
        return self.mod["main"]


def static_shape(ty: Any) -> tuple[int, ...] | None:
    """The shape of a tensor type when every dimension is a known integer, else None."""
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    values = getattr(ty.shape, "values", None)
    if values is None:
        return None
    dims = []
    for v in values:
        if not isinstance(v, tirx.IntImm):
            return None
        dims.append(int(v.value))
    return tuple(dims)


def tensor_dtype(ty: Any) -> str | None:
    """The element dtype of a tensor type as a string, or None when not a known tensor."""
    if not isinstance(ty, relax.TensorType) or ty.dtype is None:
        return None
    text = str(ty.dtype)
    return None if text in ("", "void") else text


def shape_vec(dims: Iterable[int]) -> Vec[i64]:
    """An egglog ``Vec[i64]`` for a static shape or axis list."""
    dims = [i64(int(d)) for d in dims]
    return Vec[i64](*dims) if dims else Vec[i64].empty()


def translate(mod: tvm.IRModule) -> Translation:
    """Translate ``mod["main"]`` into one term and side tables.

    Parameters
    ----------
    mod : tvm.IRModule
        Relax module with a function ``main``.  Parameters at positions
        ``>= attrs["num_input"]`` are weights (all are activations when the attribute is
        missing); tensor constants are weights too.

    Returns
    -------
    Translation

    Raises
    ------
    UnsupportedProgram
        ``main`` is missing or not a Relax function, or uses ``If``, nested functions or
        another construct outside dataflow graphs.
    """
    if "main" not in mod or not isinstance(mod["main"], relax.Function):
        raise UnsupportedProgram("the module has no Relax function 'main'")
    return _Translator(mod).run()


class _Translator:
    def __init__(self, mod: tvm.IRModule) -> None:
        self.mod = mod
        self.func = mod["main"]
        self.env: dict[Any, Tensor] = {}
        self.consts: dict[str, Any] = {}
        self.opaques: dict[str, OpaqueSpec] = {}
        self.facts: list[ActionLike] = []
        self.fact_values: list[tuple[Tensor, str, Any]] = []
        self.content: dict[tuple[int, str], Any] = {}
        self.bound = dict(relax.analysis.get_var2val(self.func).items())  # variable -> its value

    def run(self) -> Translation:
        func = self.func
        num_input = func.attrs.get("num_input") if func.attrs is not None else None
        num_input = len(func.params) if num_input is None else int(num_input)
        names: list[str] = []
        for index, param in enumerate(func.params):
            name = param.name if param.name not in names else f"{param.name}#{index}"
            names.append(name)
            term = Tensor.var(name)
            self.env[param] = term
            self._type_facts(term, param.ty)
            if index >= num_input:
                self._order_fact(term, index)
        body = func.body
        if not isinstance(body, relax.SeqExpr):
            root = self.term(body)
        else:
            for block in body.blocks:
                for binding in block.bindings:
                    self.bind(binding)
            root = self.term(body.body)
        return Translation(
            mod=self.mod,
            root=root,
            param_names=tuple(names),
            consts=self.consts,
            opaques=self.opaques,
            facts=self.facts,
            fact_values=self.fact_values,
        )

    # -- bindings and expressions ------------------------------------------------------

    def bind(self, binding: Any) -> None:
        if isinstance(binding, relax.MatchCast):
            spec = OpaqueSpec(
                op=None, args=(Hole(0),), attrs=None, ty_args=(), match_cast=binding.ty
            )
            key = self._key(self.opaques, ["match_cast", binding.ty], spec)
            term = Tensor.opaque("relax.match_cast", key, Vec[Tensor](self.term(binding.value)))
        elif isinstance(binding, relax.VarBinding):
            term = self.term(binding.value, binding.var.ty)
        else:
            raise UnsupportedProgram(f"unsupported binding {type(binding).__name__}")
        self.env[binding.var] = term
        self._type_facts(term, binding.var.ty)

    def term(self, expr: Any, ty: Any = None) -> Tensor:
        """The term of an expression; ``ty`` is the type of the variable it is bound to."""
        if isinstance(expr, tvm.ir.Var):
            if expr not in self.env:
                raise UnsupportedProgram(f"free variable {expr.name}")
            return self.env[expr]
        if isinstance(expr, tvm.ir.Tuple):
            return lang.make_tuple(Vec[Tensor](*[self.term(f) for f in expr.fields]))
        if isinstance(expr, tvm.ir.TupleGetItem):
            return lang.get_item(self.term(expr.tuple_value), i64(int(expr.index)))
        if isinstance(expr, tvm.ir.Call):
            return self.call(expr, expr.ty if ty is None else ty)
        if isinstance(expr, relax.If | relax.Function | relax.SeqExpr):
            raise UnsupportedProgram(f"unsupported expression {type(expr).__name__}")
        return self.leaf(expr)

    def leaf(self, expr: Any) -> Tensor:
        known = len(self.consts)
        key = self._key(self.consts, ["const", expr], expr)
        term = Tensor.const(key)
        if len(self.consts) > known:  # first time this leaf is seen
            ty = getattr(expr, "ty", None)
            self._type_facts(term, ty)
            if static_shape(ty) is not None:
                self._order_fact(term, _CONST_ORDER_BASE + len(self.consts))
        return term

    def call(self, call: Any, ty: Any) -> Tensor:
        op = call.op
        name = op.name if isinstance(op, tvm.ir.Op) else None
        builder = _FIRST_CLASS.get(name) if name else None
        if builder is not None:
            term = builder(self, call, ty)
            if term is not None:
                return term
        holes: list[Tensor] = []
        template = tuple(self._template(a, holes) for a in call.args)
        spec = OpaqueSpec(op=op, args=template, attrs=call.attrs, ty_args=tuple(call.ty_args))
        static = [op, call.attrs, list(call.ty_args), _encode(template)]
        key = self._key(self.opaques, static, spec)
        label = name if name is not None else getattr(op, "name_hint", type(op).__name__)
        return Tensor.opaque(label, key, Vec[Tensor](*holes))

    def _template(self, arg: Any, holes: list[Tensor]) -> Any:
        if isinstance(arg, tvm.ir.Tuple) and _has_var(arg):
            return tuple(self._template(f, holes) for f in arg.fields)
        if isinstance(arg, tvm.ir.Var) or _is_tensor_const(arg):
            holes.append(self.term(arg))
            return Hole(len(holes) - 1)
        if _has_var(arg):
            raise UnsupportedProgram(f"unsupported call argument {type(arg).__name__}")
        return arg

    # -- facts and keys ----------------------------------------------------------------

    def _type_facts(self, term: Tensor, ty: Any) -> None:
        dims = static_shape(ty)
        if dims is not None:
            self.facts.append(set_(lang.shape(term)).to(shape_vec(dims)))
            self.fact_values.append((term, "shape", dims))
        dt = tensor_dtype(ty)
        if dt is not None:
            self.facts.append(set_(lang.dtype(term)).to(String(dt)))
            self.fact_values.append((term, "dtype", dt))

    def _order_fact(self, term: Tensor, order: int) -> None:
        self.facts.append(set_(lang.order(term)).to(i64(order)))
        self.fact_values.append((term, "order", order))

    def _key(self, table: dict[str, Any], content: list, value: Any) -> str:
        """A stable key for ``content``; structurally equal content gets the same key."""
        content_obj = ffi_convert(content)
        base = f"{structural_hash(content_obj, map_free_vars=True):016x}"
        key, n = base, 0
        while key in table:
            if structural_equal(
                self.content[id(table), key], content_obj, map_free_vars=True
            ):
                return key
            n += 1
            key = f"{base}-{n}"
        table[key] = value
        self.content[id(table), key] = content_obj
        return key


def _encode(template: Any) -> Any:
    """The template with holes replaced by strings, for hashing."""
    if isinstance(template, Hole):
        return f"$hole{template.index}"
    if isinstance(template, tuple):
        return [_encode(t) for t in template]
    return template


def _has_var(expr: Any) -> bool:
    if isinstance(expr, tvm.ir.Var):
        return True
    if isinstance(expr, tvm.ir.Tuple):
        return any(_has_var(f) for f in expr.fields)
    return False


def _is_tensor_const(expr: Any) -> bool:
    return isinstance(expr, tvm.ir.GenericConst) and isinstance(
        getattr(expr, "ty", None), relax.TensorType
    )


# -- constructors for the operators rules look at ------------------------------------


def _matmul(t: _Translator, call: Any, ty: Any) -> Tensor | None:
    a, b = call.args
    out_dtype = str(call.attrs.out_dtype) if call.attrs is not None else ""
    if out_dtype not in ("", "void", "None") and out_dtype != tensor_dtype(a.ty):
        return None
    return lang.matmul(t.term(a), t.term(b))


def _permute_dims(t: _Translator, call: Any, ty: Any) -> Tensor | None:
    (a,) = call.args
    axes = call.attrs.axes
    if axes is None:
        dims = static_shape(a.ty)
        if dims is None:
            return None
        axes = list(reversed(range(len(dims))))
    return lang.permute_dims(t.term(a), shape_vec(int(x) for x in axes))


def _reshape(t: _Translator, call: Any, ty: Any) -> Tensor | None:
    dims = static_shape(ty)
    if dims is None:
        return None
    repeated = _repeated_heads(t, call.args[0], dims)
    if repeated is not None:
        return repeated
    return lang.reshape(t.term(call.args[0]), shape_vec(dims))


def _repeated_heads(t: _Translator, arg: Any, dims: tuple[int, ...]) -> Tensor | None:
    """``repeat_heads(k, n)`` when ``arg`` is ``broadcast_to(expand_dims(k, [2]), ...)``.

    That chain, reshaped from ``[B, KV, n, L, D]`` to ``[B, KV * n, L, D]``, is how
    transformers' ``repeat_kv`` (grouped-query attention) exports.
    """
    spread = t.bound.get(arg)
    if not _is_op(spread, "relax.broadcast_to"):
        return None
    expanded = t.bound.get(spread.args[0])
    if not _is_op(expanded, "relax.expand_dims") or [int(a) for a in expanded.attrs.axis] != [2]:
        return None
    k = expanded.args[0]
    k_dims, out = static_shape(k.ty), static_shape(spread.ty)
    if k_dims is None or out is None or len(k_dims) != 4 or len(out) != 5:
        return None
    batch, kv, length, depth = k_dims
    n = out[2]
    if out != (batch, kv, n, length, depth) or dims != (batch, kv * n, length, depth):
        return None
    return lang.repeat_heads(t.term(k), i64(n))


def _broadcast_to(t: _Translator, call: Any, ty: Any) -> Tensor | None:
    """A ``broadcast_to`` of a static shape to that same shape is its argument."""
    dims = static_shape(ty)
    if dims is None or static_shape(call.args[0].ty) != dims:
        return None
    return t.term(call.args[0])


def _is_op(call: Any, name: str) -> bool:
    return isinstance(call, tvm.ir.Call) and isinstance(call.op, tvm.ir.Op) and call.op.name == name


def _binary(fn: Any) -> Any:
    def build(t: _Translator, call: Any, ty: Any) -> Tensor | None:
        a, b = call.args
        return fn(t.term(a), t.term(b))

    return build


def _unary(fn: Any) -> Any:
    def build(t: _Translator, call: Any, ty: Any) -> Tensor | None:
        return fn(t.term(call.args[0]))

    return build


def _power(t: _Translator, call: Any, ty: Any) -> Tensor | None:
    """``power(a, 2.0)`` with a scalar constant exponent of exactly 2 is ``square(a)``."""
    a, exponent = call.args
    if not isinstance(exponent, tvm.ir.GenericConst) or tuple(exponent.value.shape) != ():
        return None
    if float(exponent.value.numpy()) != 2.0 or tensor_dtype(exponent.ty) != tensor_dtype(a.ty):
        return None
    return lang.square(t.term(a))


def _mean(t: _Translator, call: Any, ty: Any) -> Tensor | None:
    """``mean(a, axis=[-1], keepdims=True)`` (static rank) is ``mean_last(a)``."""
    (a,) = call.args
    dims = static_shape(a.ty)
    axes = call.attrs.axis
    if dims is None or axes is None or len(axes) != 1 or not call.attrs.keepdims:
        return None
    if int(axes[0]) % len(dims) != len(dims) - 1:
        return None
    return lang.mean_last(t.term(a))


def _softmax(t: _Translator, call: Any, ty: Any) -> Tensor | None:
    """``softmax(a, axis=-1)`` (static rank) is ``softmax_last(a)``."""
    (a,) = call.args
    dims = static_shape(a.ty)
    if dims is None or int(call.attrs.axis) % len(dims) != len(dims) - 1:
        return None
    return lang.softmax_last(t.term(a))


def _concat(t: _Translator, call: Any, ty: Any) -> Tensor | None:
    """``concat([negative(x[..., D/2:]), x[..., :D/2]], axis=-1)`` is ``rotate_half(x)``.

    That is how transformers' ``rotate_half`` (rotary position embedding, Su et al.
    2021) exports: two ``strided_slice`` of the last axis of one ``x [..., D]`` with a
    static, even ``D``, the upper half negated and put first.
    """
    parts = call.args[0]
    dims = static_shape(ty)
    if not isinstance(parts, tvm.ir.Tuple) or len(parts.fields) != 2 or dims is None:
        return None
    if int(call.attrs.axis) % len(dims) != len(dims) - 1 or dims[-1] % 2:
        return None
    negated = t.bound.get(parts.fields[0])
    if not _is_op(negated, "relax.negative"):
        return None
    upper, lower = t.bound.get(negated.args[0]), t.bound.get(parts.fields[1])
    half = dims[-1] // 2
    if not (_last_axis_slice(upper, half, dims) and _last_axis_slice(lower, 0, dims)):
        return None
    x = upper.args[0]
    if not x.same_as(lower.args[0]) or static_shape(x.ty) != dims or tensor_dtype(x.ty) != tensor_dtype(ty):
        return None
    return lang.rotate_half(t.term(x))


def _last_axis_slice(call: Any, begin: int, dims: tuple[int, ...]) -> bool:
    """Whether ``call`` is ``strided_slice(x, [last], [begin], [begin + D/2])`` with unit strides."""
    if not _is_op(call, "relax.strided_slice") or len(call.args) < 4:
        return False
    sliced = static_shape(call.ty)
    if sliced is None or sliced[:-1] != dims[:-1] or sliced[-1] != dims[-1] // 2:
        return False
    axes, begins = _ints(call.args[1]), _ints(call.args[2])
    strides = _ints(call.args[4]) if len(call.args) > 4 else None
    rank = len(dims)
    return (axes is not None and [a % rank for a in axes] == [rank - 1] and begins == [begin]
            and strides in (None, [1]))


def _ints(arg: Any) -> list[int] | None:
    """The integers of a ``strided_slice`` argument (a tuple of ``PrimValue``s); None for none."""
    if arg is None:
        return None
    try:
        return [int(getattr(v, "value", v)) for v in getattr(arg, "fields", arg)]
    except (TypeError, ValueError):
        return None


_FIRST_CLASS = {
    "relax.matmul": _matmul,
    "relax.permute_dims": _permute_dims,
    "relax.reshape": _reshape,
    "relax.broadcast_to": _broadcast_to,
    "relax.add": _binary(lang.add),
    "relax.multiply": _binary(lang.multiply),
    "relax.sigmoid": _unary(lang.sigmoid),
    "relax.nn.silu": _unary(lang.silu),
    "relax.power": _power,
    "relax.mean": _mean,
    "relax.rsqrt": _unary(lang.rsqrt),
    "relax.nn.softmax": _softmax,
    "relax.concat": _concat,
}

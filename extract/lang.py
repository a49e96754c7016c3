"""The e-graph term language: one sort of tensor values and its constructors.

A Relax dataflow graph becomes one :class:`Tensor` term.  The operators that rewrite
rules look at have their own constructors (``matmul``, ``dense``, ``reshape``...); every
other Relax call is an :meth:`Tensor.opaque` node whose ``key`` points into a Python side
table (see :mod:`extract.translate`) that keeps the original operator, attributes and
static arguments, so any dataflow graph translates and translates back.

Shapes and dtypes are e-class facts: :func:`shape` (static shapes only) and
:func:`dtype`.  Translation sets them for every value of the input program and the
``shapes`` ruleset (:mod:`extract.rules`) derives them for nodes created by rewrites, so
rules can require them and only fire where they are valid.  These functions have no merge
function on purpose: two different shapes for one e-class would mean an unsound rewrite,
and egglog stops with an error instead of silently picking one.

Constructor semantics (``x @ W^T`` reads ``W`` in its stored ``[N, K]`` layout):

=========================================  =============================================
``Tensor.var(name)``                       a parameter of the Relax function
``Tensor.const(key)``                      a constant / non-tensor leaf (side table)
``Tensor.opaque(op, key, args)``           any other Relax call, tensor args in order
``make_tuple(fields)``, ``get_item(t, i)`` tuple values
``matmul(a, b)``                           ``relax.matmul`` (out dtype = input dtype)
``permute_dims(a, axes)``                  ``relax.permute_dims``
``reshape(a, shape)``                      ``relax.reshape`` to a static shape
``add``, ``multiply``                      broadcasting elementwise binary ops
``sigmoid``, ``silu``                      elementwise unary ops
``dense(x, W)``                            ``x @ W^T``; ``x [..., K]``, ``W [N, K]``
``concat(ws)``                             weights concatenated along axis 0 (merges)
``merged_dense(x, Wcat, begin, end)``      columns ``[begin, end)`` of ``dense(x, Wcat)``
``dense_add(x, W, r)``                     ``x @ W^T + r`` (``r`` has the output shape)
``silu_mul_dense(x, Wg, Wu)``              ``silu(x @ Wg^T) * (x @ Wu^T)``
``dense_bias(x, W, b)``                    ``x @ W^T + b``; ``b [N]`` broadcast over rows
``merged_dense_bias(x, Wc, bc, i, j)``     columns ``[i, j)`` of ``dense_bias(x, Wc, bc)``
``square(a)``                              ``relax.power(a, 2.0)``
``mean_last(a)``                           ``relax.mean(a, axis=[-1], keepdims=True)``
``rsqrt(a)``                               ``relax.rsqrt(a)``
``rms_norm(x, g, eps)``                    ``x * rsqrt(mean_last(x^2) + eps) * g``; ``g [H]``,
                                           ``eps`` a scalar constant (RMSNorm, Zhang and
                                           Sennrich 2019)
``rms_norm_dense(x, g, eps, W)``           ``dense(rms_norm(x, g, eps), W)`` in one kernel
                                           (the norm as the GEMM's prologue)
``repeat_heads(k, n)``                     each head of ``k [B, KV, L, D]`` repeated ``n``
                                           times in place: ``[B, KV * n, L, D]``, head
                                           ``h`` is ``k[:, h // n]`` (transformers'
                                           ``repeat_kv`` for grouped-query attention)
``gqa_scores(q, k)``                       ``q @ repeat_heads(k, H // KV)^T`` without the
                                           repeat: ``q [B, H, S, D]``, ``k [B, KV, L, D]``
                                           -> ``[B, H, S, L]``
``gqa_context(p, v)``                      ``p @ repeat_heads(v, H // KV)`` without the
                                           repeat: ``p [B, H, S, L]``, ``v [B, KV, L, D]``
                                           -> ``[B, H, S, D]``
``gqa_scores_packed(q, k, b)``             ``gqa_scores(q, k)`` by one kernel that first
                                           packs the keys into blocks of ``b``,
                                           ``[B, KV, L / b, D, b]``, then reads them as
                                           a packed weight (an activation layout choice,
                                           paid on every run)
``dense_packed(x, W, b)``                  ``dense(x, W)`` computed from ``W`` packed
                                           once into blocks of ``b`` rows,
                                           ``[N / b, K, b]`` (the same value by another
                                           kernel: a weight layout choice)
``merged_dense_packed(x, Wc, b, i, j)``    ``merged_dense(x, Wc, i, j)`` with the merged
                                           weight packed the same way
``softmax_last(a)``                        ``relax.nn.softmax(a, axis=-1)``
``fast_softmax_last(a)``                   ``softmax_last(a)`` with TVM's ``fast_exp``
                                           (a vectorisable polynomial approximation of
                                           ``exp``, ``topi.nn.fast_softmax``)
``fast_silu(a)``                           ``silu(a)`` as ``a / (1 + fast_exp(-a))``
``attention(q, k, v, c, m)``               ``gqa_context(softmax_last(gqa_scores(q, k) *
                                           c + m), v)`` as one kernel: ``c`` a scalar
                                           scale, ``m`` an additive mask broadcast to
                                           the scores ``[B, H, S, L]``; -> ``[B, H, S, D]``
``fast_attention(q, k, v, c, m)``          ``attention`` with TVM's ``fast_exp``
``rotate_half(a)``                         ``concat([-a[..., D/2:], a[..., :D/2]], -1)``
                                           for ``a [..., D]``, ``D`` even (rotary
                                           embedding's half rotation, Su et al. 2021)
``rotary(x, c, s)``                        ``x * c + rotate_half(x) * s``: rotary
                                           position embedding; ``c`` (cosines) and ``s``
                                           (sines) broadcast to ``x``
``rotary_dense(x, W, c, s, hs)``           ``rotary(permute_dims(reshape(dense(x, W),
                                           hs), [0, 2, 1, 3]), c, s)`` as one kernel:
                                           the Q or K projection with its head split
                                           ``hs = [B, S, H, D]`` and rotary embedding as
                                           the GEMM's epilogue; -> ``[B, H, S, D]``
``rotary_norm_dense(x, W, g, eps, c, s,    the same with a per-head RMSNorm between the
hs)``                                      split and the rotation (Qwen3's Q/K norm):
                                           ``rotary(permute_dims(rms_norm(reshape(
                                           dense(x, W), hs), g, eps), ...), c, s)``
=========================================  =============================================

``merged_dense`` is how a merged GEMM appears: the parts of one merged product share the
same ``(x, Wcat)`` and lower to one GEMM plus a split, but each part is its own e-node,
so extraction can charge each part its share of the merged GEMM and stay monotone.
The packed forms are in the same e-class as the unpacked ones (they compute the same
value); which one a program uses is the extractor's choice.
"""

from __future__ import annotations

from collections.abc import Iterator

from egglog import Expr, String, StringLike, Vec, function, i64, i64Like
from egglog.declarations import (
    CallDecl,
    ClassMethodRef,
    FunctionRef,
    InitRef,
    ValueDecl,
)
from egglog.deconstruct import get_callable_args, get_literal_value

__all__ = [
    "Tensor",
    "add",
    "attention",
    "concat",
    "dense",
    "dense_add",
    "dense_bias",
    "dense_packed",
    "decl_name",
    "e_class_facts",
    "dtype",
    "fast_attention",
    "fast_silu",
    "fast_softmax_last",
    "get_item",
    "gqa_context",
    "gqa_scores",
    "gqa_scores_packed",
    "ints",
    "make_tuple",
    "matmul",
    "mean_last",
    "merged_dense",
    "merged_dense_bias",
    "merged_dense_packed",
    "multiply",
    "node_args",
    "node_name",
    "order",
    "permute_dims",
    "program_root",
    "repeat_heads",
    "reshape",
    "rms_norm",
    "rms_norm_dense",
    "rotary",
    "rotary_dense",
    "rotary_norm_dense",
    "rotate_half",
    "rsqrt",
    "shape",
    "sigmoid",
    "silu",
    "silu_mul_dense",
    "softmax_last",
    "square",
    "subterms",
]


class Tensor(Expr):
    """A tensor (or tuple) value of a Relax dataflow graph."""

    @classmethod
    def var(cls, name: StringLike) -> Tensor:  # type: ignore[empty-body]
        """A parameter of the Relax function, by name."""

    @classmethod
    def const(cls, key: StringLike) -> Tensor:  # type: ignore[empty-body]
        """A constant or other leaf value, by side-table key."""

    @classmethod
    def opaque(cls, op: StringLike, key: StringLike, args: Vec[Tensor]) -> Tensor:  # type: ignore[empty-body]
        """A Relax call without its own constructor: op name, side-table key, tensor args."""


@function
def make_tuple(fields: Vec[Tensor]) -> Tensor: ...


@function
def get_item(t: Tensor, index: i64Like) -> Tensor: ...


@function
def matmul(a: Tensor, b: Tensor) -> Tensor: ...


@function
def permute_dims(a: Tensor, axes: Vec[i64]) -> Tensor: ...


@function
def reshape(a: Tensor, new_shape: Vec[i64]) -> Tensor: ...


@function
def add(a: Tensor, b: Tensor) -> Tensor: ...


@function
def multiply(a: Tensor, b: Tensor) -> Tensor: ...


@function
def sigmoid(a: Tensor) -> Tensor: ...


@function
def silu(a: Tensor) -> Tensor: ...


@function
def dense(x: Tensor, w: Tensor) -> Tensor: ...


@function
def concat(parts: Vec[Tensor]) -> Tensor: ...


@function
def merged_dense(x: Tensor, wcat: Tensor, begin: i64Like, end: i64Like) -> Tensor: ...


@function
def dense_add(x: Tensor, w: Tensor, r: Tensor) -> Tensor: ...


@function
def silu_mul_dense(x: Tensor, wg: Tensor, wu: Tensor) -> Tensor: ...


@function
def dense_bias(x: Tensor, w: Tensor, b: Tensor) -> Tensor: ...


@function
def merged_dense_bias(
    x: Tensor, wcat: Tensor, bcat: Tensor, begin: i64Like, end: i64Like
) -> Tensor: ...


@function
def square(a: Tensor) -> Tensor: ...


@function
def mean_last(a: Tensor) -> Tensor: ...


@function
def rsqrt(a: Tensor) -> Tensor: ...


@function
def rms_norm(x: Tensor, g: Tensor, eps: Tensor) -> Tensor: ...


@function
def rms_norm_dense(x: Tensor, g: Tensor, eps: Tensor, w: Tensor) -> Tensor: ...


@function
def repeat_heads(k: Tensor, n: i64Like) -> Tensor: ...


@function
def gqa_scores(q: Tensor, k: Tensor) -> Tensor: ...


@function
def gqa_context(p: Tensor, v: Tensor) -> Tensor: ...


@function
def gqa_scores_packed(q: Tensor, k: Tensor, block: i64Like) -> Tensor: ...


@function
def dense_packed(x: Tensor, w: Tensor, block: i64Like) -> Tensor: ...


@function
def merged_dense_packed(
    x: Tensor, wcat: Tensor, block: i64Like, begin: i64Like, end: i64Like
) -> Tensor: ...


@function
def softmax_last(a: Tensor) -> Tensor: ...


@function
def fast_softmax_last(a: Tensor) -> Tensor: ...


@function
def fast_silu(a: Tensor) -> Tensor: ...


@function
def attention(q: Tensor, k: Tensor, v: Tensor, scale: Tensor, mask: Tensor) -> Tensor: ...


@function
def fast_attention(q: Tensor, k: Tensor, v: Tensor, scale: Tensor, mask: Tensor) -> Tensor: ...


@function
def rotate_half(a: Tensor) -> Tensor: ...


@function
def rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor: ...


@function
def rotary_dense(x: Tensor, w: Tensor, cos: Tensor, sin: Tensor, heads_shape: Vec[i64]) -> Tensor: ...


@function
def rotary_norm_dense(
    x: Tensor, w: Tensor, g: Tensor, eps: Tensor, cos: Tensor, sin: Tensor, heads_shape: Vec[i64]
) -> Tensor: ...


@function
def shape(t: Tensor) -> Vec[i64]:  # type: ignore[empty-body]
    """Static shape of a tensor e-class (absent for symbolic shapes and tuples)."""


@function
def dtype(t: Tensor) -> String:  # type: ignore[empty-body]
    """Element dtype of a tensor e-class, e.g. ``"float32"``."""


@function
def program_root(t: Tensor) -> i64:  # type: ignore[empty-body]
    """Set (to 1) on the e-class of the program's output, so extractors can find it."""


@function
def order(t: Tensor) -> i64:  # type: ignore[empty-body]
    """Position of a weight leaf (a parameter after ``num_input``, or a tensor constant).

    Only weights have an order.  Merge rules require it and list weights in increasing
    order, so each set of weights is merged once, not once per permutation.
    """


def node_name(term: object) -> str | None:
    """The constructor name of a term or e-node (``"dense"``, ``"Tensor.var"``...).

    Returns None for literals and e-class references.  ``Vec`` containers are ``"Vec"``.
    """
    decl = term.__egg_typed_expr__.expr  # type: ignore[attr-defined]
    return decl_name(decl) if isinstance(decl, CallDecl) else None


def decl_name(decl: CallDecl) -> str | None:
    """The constructor name of an egglog call declaration, as :func:`node_name` gives it."""
    ref = decl.callable
    if isinstance(ref, FunctionRef):
        return ref.ident.name
    if isinstance(ref, ClassMethodRef):
        return f"{ref.ident.name}.{ref.method_name}"
    if isinstance(ref, InitRef):
        return ref.ident.name
    return None


def node_args(term: object) -> tuple:
    """The arguments of a constructor call (elements for a ``Vec``)."""
    return tuple(get_callable_args(term))  # type: ignore[arg-type]


def ints(vec: object) -> tuple[int, ...]:
    """The Python ints of an extracted ``Vec[i64]`` literal term."""
    return tuple(int(get_literal_value(v)) for v in node_args(vec))  # type: ignore[arg-type]


def subterms(root: Tensor) -> Iterator[Tensor]:
    """Each distinct ``Tensor`` subterm of ``root`` once, children before parents."""
    seen: set = set()
    stack: list[tuple[object, bool]] = [(root, False)]
    while stack:
        term, expanded = stack.pop()
        key = term.__egg_typed_expr__  # type: ignore[attr-defined]
        if expanded:
            if key not in seen:
                seen.add(key)
                if key.tp.ident.name == "Tensor":
                    yield term  # type: ignore[misc]
            continue
        if key in seen:
            continue
        stack.append((term, True))
        if node_name(term) is not None:
            stack.extend((child, False) for child in reversed(node_args(term)))


def e_class_facts(frozen: object) -> dict[tuple[str, object], object]:
    """The facts set on e-classes in a frozen e-graph (``egraph.freeze().decl``).

    Returns ``{(function name, e-class value): value}`` for one-argument functions such
    as :func:`shape` (a tuple of ints), :func:`dtype` (a string), :func:`order` and
    :func:`program_root` (ints).
    """
    facts: dict[tuple[str, object], object] = {}
    for call, result in frozen.sets.items():  # type: ignore[attr-defined]
        ident = getattr(call.callable, "ident", None)
        if ident is None or len(call.args) != 1 or not isinstance(call.args[0].expr, ValueDecl):
            continue
        expr = result.expr
        value = tuple(int(a.expr.value) for a in expr.args) if isinstance(expr, CallDecl) else expr.value
        facts[(ident.name, call.args[0].expr.value)] = value
    return facts

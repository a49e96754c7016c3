"""A term -> a Relax ``IRModule`` with the original ``main`` signature.

The new ``main`` has the same parameters (names, types, order), attributes and output
structure as the translated one; the module's other functions are kept.  Language
constructors become Relax ops; opaque nodes re-emit their original call with the new
arguments; the rewritten constructors become kernels:

- ``dense(x, W)``: one TE PrimFunc reading ``W`` in its ``[N, K]`` layout (no transpose);
- the parts of a merged GEMM (``merged_dense`` nodes sharing ``x`` and the
  concatenated weight): ``relax.op.concat`` of the weights, one ``dense`` and one
  ``relax.op.split``; each part is an item of the split;
- ``dense_add``, ``dense_bias`` and ``silu_mul_dense``: one TE PrimFunc each, GEMM
  plus epilogue; the parts of a merged biased GEMM (``merged_dense_bias``) are one
  ``dense_bias`` over the concatenated weights and biases, split;
- ``rms_norm``: ``relax.op.nn.rms_norm`` over the last axis; ``rms_norm_dense``: one TE
  PrimFunc, the row statistics then the GEMM with the norm applied to its operand;
- ``square``, ``mean_last``, ``rsqrt``: the Relax ops they were translated from;
- ``dense_packed(x, W, b)``: ``W`` packed by ``relax.op.reshape`` and
  ``relax.op.permute_dims`` into ``[N / b, K, b]`` (work on a weight alone, which
  :func:`tuner.compile.prepare_weights` moves out of the per-run function), then one TE
  PrimFunc reading the packed weight; ``merged_dense_packed`` parts: the packed merged
  GEMM, split as above;
- ``repeat_heads(k, n)``: ``relax.op.repeat(k, n, axis=1)`` (the repeated copy);
  ``gqa_scores`` and ``gqa_context``: one TE PrimFunc each, a batched GEMM that reads
  head ``h // n`` of the unrepeated K or V; ``gqa_scores_packed(q, k, b)``: one TE
  PrimFunc that packs the keys into ``[B, KV, L / b, D, b]`` and then computes the
  scores from the packed keys;
- ``softmax_last``: ``relax.op.nn.softmax`` over the last axis; ``fast_softmax_last``:
  TVM's ``topi.nn.fast_softmax`` as one TE PrimFunc; ``fast_silu``: one TE PrimFunc,
  ``a / (1 + fast_exp(-a))`` (:func:`fast_silu_te`);
- ``attention`` and ``fast_attention``: one TE PrimFunc (:func:`attention_te`), the
  scale baked in as a constant;
- ``rotate_half`` and ``rotary``: the Relax ops they were translated from (two
  ``strided_slice``, ``negative``, ``concat``; the products and sum);
  ``rotary_dense`` and ``rotary_norm_dense``: the weight packed as for ``dense_packed``,
  then one TE PrimFunc (:func:`rotary_dense_te`).

All TVM calls that build Relax live in this module.
"""

from __future__ import annotations

import math
from typing import Any

import tvm
from egglog.deconstruct import get_literal_value
from tvm import relax, te, topi

from measure.tvmapi import tirx

from .lang import Tensor, ints, node_args, node_name
from .rules import PACK_BLOCK
from .translate import Hole, OpaqueSpec, Translation, static_shape

__all__ = ["LoweringError", "emit_function", "lower"]


class LoweringError(ValueError):
    """A term cannot be turned back into Relax (an unknown constructor or side-table key)."""


def lower(term: Tensor, translation: Translation) -> tvm.IRModule:
    """Rebuild a Relax module from a term of ``translation``'s program.

    Parameters
    ----------
    term : Tensor
        A term extracted from the e-graph of ``translation`` (or its root).
    translation : Translation
        Side tables and the original module.

    Returns
    -------
    tvm.IRModule
        A module whose ``main`` has the original signature and output structure.

    Raises
    ------
    LoweringError
        The term has a node the side tables do not know.
    """
    original = translation.mod
    others = {gv: f for gv, f in original.functions_items() if gv.name_hint != "main"}
    bb = relax.BlockBuilder(tvm.IRModule(others, attrs=original.attrs))
    emit_function(bb, "main", term, translation)
    return bb.finalize()


def emit_function(
    bb: relax.BlockBuilder,
    name: str,
    term: Tensor,
    translation: Translation,
    private: bool = False,
) -> tvm.ir.GlobalVar:
    """Add the function of ``term`` to ``bb`` as ``name``, with the signature of ``main``.

    Its kernels (TE PrimFuncs) go into ``bb`` too, shared with structurally equal ones
    already there.  See :func:`lower` for the arguments and errors; ``private`` leaves
    out the global symbol (a function for :mod:`extract.dedup` to inline).

    Returns
    -------
    tvm.ir.GlobalVar
        The new function's.
    """
    func = translation.mod["main"]
    params = [relax.Var(p.name, p.ty) for p in func.params]
    attrs = {k: v for k, v in (func.attrs or {}).items() if k != "global_symbol"}
    with bb.function(name, params, attrs=attrs or None, pure=bool(func.is_pure), private=private):
        with bb.dataflow():
            lowerer = _Lowerer(
                bb, translation, dict(zip(translation.param_names, params, strict=True))
            )
            out = lowerer.value(term, root=True)
            gv = bb.emit_output(out)
        bb.emit_func_output(gv)
    return bb.get().get_global_var(name)


class _Lowerer:
    def __init__(
        self, bb: relax.BlockBuilder, translation: Translation, params: dict[str, Any]
    ) -> None:
        self.bb = bb
        self.tr = translation
        self.params = params
        self.memo: dict[Any, Any] = {}
        self.splits: dict[Any, tuple[Any, Any, list[int]]] = {}
        self.packs: dict[Any, Any] = {}

    def value(self, term: Any, root: bool = False) -> Any:
        """The Relax expression of ``term`` (emitted once per distinct subterm)."""
        key = term.__egg_typed_expr__
        if key not in self.memo:
            # Children first, iteratively, so deep graphs do not hit the recursion limit.
            for sub in _postorder(term):
                sub_key = sub.__egg_typed_expr__
                if sub_key not in self.memo:
                    self.memo[sub_key] = self._emit(sub, root=sub_key == key and root)
        return self.memo[key]

    def _emit(self, term: Any, root: bool) -> Any:
        name = node_name(term)
        args = node_args(term)
        bb = self.bb
        if name == "Tensor.var":
            return self.params[_lit(args[0])]
        if name == "Tensor.const":
            return self._table(self.tr.consts, _lit(args[0]))
        if name == "Tensor.opaque":
            spec = self._table(self.tr.opaques, _lit(args[1]))
            children = [self.memo[a.__egg_typed_expr__] for a in node_args(args[2])]
            if len(children) != _holes(spec.args):
                raise LoweringError(
                    f"opaque {_lit(args[0])} takes {_holes(spec.args)} tensors, "
                    f"the term gives {len(children)}"
                )
            return self._opaque(spec, children)
        if name == "make_tuple":
            fields = relax.Tuple([self.memo[a.__egg_typed_expr__] for a in node_args(args[0])])
            return fields if root else bb.emit(fields)
        v = [self.memo[a.__egg_typed_expr__] if _is_tensor(a) else a for a in args]
        if name == "get_item":
            return bb.emit(relax.TupleGetItem(v[0], _lit(args[1])))
        if name == "matmul":
            return bb.emit(relax.op.matmul(v[0], v[1]))
        if name == "permute_dims":
            return bb.emit(relax.op.permute_dims(v[0], list(ints(args[1]))))
        if name == "reshape":
            new_shape = ints(args[1])
            old_shape = static_shape(v[0].ty)
            if old_shape is not None and math.prod(old_shape) != math.prod(new_shape):
                raise LoweringError(
                    f"reshape of {list(old_shape)} to {list(new_shape)} in term {term}"
                )
            return bb.emit(relax.op.reshape(v[0], list(new_shape)))
        if name in _ELEMENTWISE:
            return bb.emit(_ELEMENTWISE[name](*v))
        if name == "softmax_last":
            return bb.emit(relax.op.nn.softmax(v[0], axis=-1))
        if name == "fast_softmax_last":
            return bb.emit_te(fast_softmax_te, v[0], primfunc_name_hint="fast_softmax")
        if name == "fast_silu":
            return bb.emit_te(fast_silu_te, v[0], primfunc_name_hint="fast_silu")
        if name in ("attention", "fast_attention"):
            scale, fast = self._scalar(args[3]), name == "fast_attention"
            return bb.emit_te(lambda q, k, vv, m: attention_te(q, k, vv, m, scale, fast),
                              v[0], v[1], v[2], v[4], primfunc_name_hint=name)
        if name == "rotate_half":
            return self._rotate_half(v[0])
        if name == "rotary":
            turned = bb.emit(relax.op.multiply(self._rotate_half(v[0]), v[2]))
            return bb.emit(relax.op.add(bb.emit(relax.op.multiply(v[0], v[1])), turned))
        if name in ("rotary_dense", "rotary_norm_dense"):
            heads = ints(args[-1])
            packed = self._packed(args[1], PACK_BLOCK)
            if name == "rotary_dense":
                return bb.emit_te(lambda x, wp, c, sn: rotary_dense_te(x, wp, c, sn, heads),
                                  v[0], packed, v[2], v[3], primfunc_name_hint=name)
            eps = self._scalar(args[3])
            return bb.emit_te(lambda x, wp, g, c, sn: rotary_dense_te(x, wp, c, sn, heads, g, eps),
                              v[0], packed, v[2], v[4], v[5], primfunc_name_hint=name)
        if name == "concat":
            return bb.emit(
                relax.op.concat(
                    [self.memo[a.__egg_typed_expr__] for a in node_args(args[0])], axis=0
                )
            )
        if name == "dense":
            return bb.emit_te(dense_te, v[0], v[1], primfunc_name_hint="dense")
        if name == "merged_dense":
            return self._merged_part(args, v[0], v[1], None, _lit(args[2]), _lit(args[3]))
        if name == "dense_packed":
            packed = self._packed(args[1], _lit(args[2]))
            return bb.emit_te(dense_packed_te, v[0], packed, primfunc_name_hint="dense_packed")
        if name == "merged_dense_packed":
            return self._merged_part(
                args, v[0], v[1], None, _lit(args[3]), _lit(args[4]), block=_lit(args[2])
            )
        if name == "merged_dense_bias":
            return self._merged_part(args, v[0], v[1], v[2], _lit(args[3]), _lit(args[4]))
        if name == "dense_bias":
            return bb.emit_te(dense_bias_te, v[0], v[1], v[2], primfunc_name_hint="dense_bias")
        if name == "square":
            return bb.emit(relax.op.power(v[0], relax.const(2.0, v[0].ty.dtype)))
        if name == "mean_last":
            return bb.emit(relax.op.mean(v[0], axis=[-1], keepdims=True))
        if name == "rsqrt":
            return bb.emit(relax.op.rsqrt(v[0]))
        if name == "rms_norm":
            eps = self._scalar(args[2])
            return bb.emit(relax.op.nn.rms_norm(v[0], v[1], axes=[-1], epsilon=eps))
        if name == "rms_norm_dense":
            eps = self._scalar(args[2])
            return bb.emit_te(
                lambda x, g, w: rms_norm_dense_te(x, g, w, eps),
                v[0],
                v[1],
                v[3],
                primfunc_name_hint="rms_norm_dense",
            )
        if name == "repeat_heads":
            return bb.emit(relax.op.repeat(v[0], _lit(args[1]), axis=1))
        if name == "gqa_scores":
            return bb.emit_te(gqa_scores_te, v[0], v[1], primfunc_name_hint="gqa_scores")
        if name == "gqa_context":
            return bb.emit_te(gqa_context_te, v[0], v[1], primfunc_name_hint="gqa_context")
        if name == "gqa_scores_packed":
            block = _lit(args[2])
            return bb.emit_te(lambda q, k: gqa_scores_packed_te(q, k, block), v[0], v[1],
                              primfunc_name_hint="gqa_scores_packed")
        if name == "dense_add":
            return bb.emit_te(dense_add_te, v[0], v[1], v[2], primfunc_name_hint="dense_add")
        if name == "silu_mul_dense":
            return bb.emit_te(
                silu_mul_dense_te, v[0], v[1], v[2], primfunc_name_hint="silu_mul_dense"
            )
        raise LoweringError(f"cannot lower node {name!r}")

    def _scalar(self, term: Any) -> float:
        """The Python value of a scalar tensor constant leaf (an RMSNorm epsilon, an attention scale)."""
        const = self.memo[term.__egg_typed_expr__]
        if not isinstance(const, tvm.ir.GenericConst) or tuple(const.value.shape) != ():
            raise LoweringError(f"expected a scalar constant, got {term}")
        return float(const.value.numpy())

    def _table(self, table: dict[str, Any], key: str) -> Any:
        if key not in table:
            raise LoweringError(f"unknown side-table key {key!r}")
        return table[key]

    def _opaque(self, spec: OpaqueSpec, children: list[Any]) -> Any:
        if spec.match_cast is not None:
            return self.bb.match_cast(children[0], spec.match_cast)

        def fill(t: Any) -> Any:
            if isinstance(t, Hole):
                return children[t.index]
            if isinstance(t, tuple):
                return relax.Tuple([fill(x) for x in t])
            return t

        args = [fill(t) for t in spec.args]
        return self.bb.emit(relax.Call(spec.op, args, spec.attrs, list(spec.ty_args)))

    def _rotate_half(self, x: Any) -> Any:
        """``concat([-x[..., D/2:], x[..., :D/2]], -1)`` as the Relax ops it was translated from."""
        dims = static_shape(x.ty)
        last, half = len(dims) - 1, dims[-1] // 2
        upper = self.bb.emit(relax.op.strided_slice(x, axes=[last], begin=[half], end=[dims[-1]]))
        lower = self.bb.emit(relax.op.strided_slice(x, axes=[last], begin=[0], end=[half]))
        return self.bb.emit(relax.op.concat([self.bb.emit(relax.op.negative(upper)), lower], axis=-1))

    def _packed(self, weight: Any, block: int) -> Any:
        """The weight term's value ``[N, K]`` packed into ``[N / block, K, block]``
        (emitted once per weight and block)."""
        key = (weight.__egg_typed_expr__, block)
        if key not in self.packs:
            w = self.memo[weight.__egg_typed_expr__]
            rows, cols = static_shape(w.ty)
            blocks = self.bb.emit(relax.op.reshape(w, [rows // block, block, cols]))
            self.packs[key] = self.bb.emit(relax.op.permute_dims(blocks, [0, 2, 1]))
        return self.packs[key]

    def _merged_part(
        self, args: tuple, x: Any, wcat: Any, bcat: Any, begin: int, end: int,
        block: int | None = None,
    ) -> Any:
        """One part of a merged GEMM (biased when ``bcat`` is given, from the weight packed
        in blocks of ``block`` rows when given): the whole GEMM and split are emitted once."""
        group = tuple(a.__egg_typed_expr__ for a in args[: 2 if bcat is None else 3]) + (block,)
        if group not in self.splits:
            weights = node_args(node_args(args[1])[0]) if node_name(args[1]) == "concat" else ()
            rows = [static_shape(self.memo[w.__egg_typed_expr__].ty) for w in weights]
            if block is not None:
                product = self.bb.emit_te(
                    dense_packed_te, x, self._packed(args[1], block), primfunc_name_hint="dense_packed"
                )
            elif bcat is None:
                product = self.bb.emit_te(dense_te, x, wcat, primfunc_name_hint="dense")
            else:
                product = self.bb.emit_te(
                    dense_bias_te, x, wcat, bcat, primfunc_name_hint="dense_bias"
                )
            ndim = len(static_shape(product.ty) or ())
            bounds = [0]
            for shape in rows:
                bounds.append(bounds[-1] + (shape[0] if shape else 0))
            if len(bounds) > 2 and all(rows) and ndim:
                parts = self.bb.emit(relax.op.split(product, bounds[1:-1], axis=ndim - 1))
            else:
                parts = None
            self.splits[group] = (product, parts, bounds)
        product, parts, bounds = self.splits[group]
        if parts is not None and begin in bounds and bounds.index(begin) + 1 < len(bounds):
            index = bounds.index(begin)
            if bounds[index + 1] == end:
                return self.bb.emit(relax.TupleGetItem(parts, index))
        ndim = len(static_shape(product.ty) or ())
        return self.bb.emit(
            relax.op.strided_slice(product, axes=[ndim - 1], begin=[begin], end=[end])
        )


_ELEMENTWISE = {
    "add": relax.op.add,
    "multiply": relax.op.multiply,
    "sigmoid": relax.op.sigmoid,
    "silu": relax.op.nn.silu,
}


def _holes(template: Any) -> int:
    if isinstance(template, Hole):
        return 1
    if isinstance(template, tuple):
        return sum(_holes(t) for t in template)
    return 0


def _postorder(term: Any) -> list[Any]:
    order: list[Any] = []
    seen: set = set()
    stack = [(term, False)]
    while stack:
        t, expanded = stack.pop()
        key = t.__egg_typed_expr__
        if expanded:
            order.append(t)
            continue
        if key in seen:
            continue
        seen.add(key)
        stack.append((t, True))
        for child in reversed(_tensor_children(t)):
            stack.append((child, False))
    return order


def _tensor_children(term: Any) -> list[Any]:
    children = []
    for a in node_args(term) if node_name(term) else ():
        if _is_tensor(a):
            children.append(a)
        elif (
            node_name(a) == "Vec"
            and a.__egg_typed_expr__.tp.args
            and _is_tensor_type(a.__egg_typed_expr__.tp.args[0])
        ):
            children.extend(node_args(a))
    return children


def _is_tensor(term: Any) -> bool:
    return _is_tensor_type(term.__egg_typed_expr__.tp)


def _is_tensor_type(tp: Any) -> bool:
    return tp.ident.name == "Tensor"


def _lit(term: Any) -> Any:
    return get_literal_value(term)


# -- kernels (TE) ---------------------------------------------------------------------


def _gemm(x: te.Tensor, w: te.Tensor, name: str) -> te.Tensor:
    """``x @ w^T`` for ``x [..., K]`` and ``w [N, K]``: reads ``w`` in place."""
    k = te.reduce_axis((0, x.shape[-1]), name="k")
    return te.compute(
        (*x.shape[:-1], w.shape[0]),
        lambda *i: te.sum(x[(*i[:-1], k)] * w[i[-1], k], axis=k),
        name=name,
    )


def dense_te(x: te.Tensor, w: te.Tensor) -> te.Tensor:
    """TE of ``dense``: ``x [..., K]``, ``w [N, K]`` -> ``[..., N]`` in ``x``'s dtype."""
    return _gemm(x, w, "dense")


def dense_packed_te(x: te.Tensor, wp: te.Tensor) -> te.Tensor:
    """TE of ``dense_packed``: ``x [..., K]``, ``wp [N / b, K, b]`` -> ``[..., N]``.

    ``out[..., n] = sum_k x[..., k] * wp[n // b, k, n % b]``, where ``wp`` is ``W [N, K]``
    packed as ``wp[i, k, j] = W[i * b + j, k]`` (the blocked layout of TVM's CPU GEMM
    schedules: each block of ``b`` outputs streams one contiguous ``K x b`` panel).
    """
    block = wp.shape[2]
    k = te.reduce_axis((0, x.shape[-1]), name="k")
    return te.compute(
        (*x.shape[:-1], wp.shape[0] * block),
        lambda *i: te.sum(x[(*i[:-1], k)] * wp[i[-1] // block, k, i[-1] % block], axis=k),
        name="dense_packed",
    )


def dense_add_te(x: te.Tensor, w: te.Tensor, r: te.Tensor) -> te.Tensor:
    """TE of ``dense_add``: ``x @ w^T + r``; ``r`` has the product's shape."""
    y = _gemm(x, w, "dense")
    return te.compute(y.shape, lambda *i: y[i] + r[i], name="dense_add")


def silu_mul_dense_te(x: te.Tensor, wg: te.Tensor, wu: te.Tensor) -> te.Tensor:
    """TE of ``silu_mul_dense``: ``silu(x @ wg^T) * (x @ wu^T)`` in one PrimFunc."""
    g = _gemm(x, wg, "gate")
    u = _gemm(x, wu, "up")
    return te.compute(g.shape, lambda *i: g[i] * te.sigmoid(g[i]) * u[i], name="silu_mul_dense")


def fast_softmax_te(a: te.Tensor) -> te.Tensor:
    """TE of ``fast_softmax_last``: softmax over ``a``'s last axis with TVM's ``fast_exp``.

    ``topi.nn.fast_softmax``: row maximum, ``fast_exp(a - max)``, row sum, division.
    ``fast_exp`` (``topi.fast_exp``, float32 only) clamps its argument to about
    ``[-88.4, 88.4]`` and evaluates Cephes' ``expf`` polynomial, so it vectorises where
    ``exp`` becomes a scalar libm call per element.
    """
    return topi.nn.fast_softmax(a, axis=-1)


def fast_silu_te(a: te.Tensor) -> te.Tensor:
    """TE of ``fast_silu``: ``a * sigmoid(a)`` as ``a / (1 + fast_exp(-a))`` (float32).

    The clamp inside ``fast_exp`` keeps both tails finite: ``a`` far below zero gives
    ``a / (1 + 2.4e38)``, about 0, and far above gives ``a``.
    """
    e = topi.fast_exp(te.compute(a.shape, lambda *i: -a[i], name="negate"))
    return te.compute(a.shape, lambda *i: a[i] / (e[i] + tirx.const(1.0, a.dtype)), name="fast_silu")


def dense_bias_te(x: te.Tensor, w: te.Tensor, b: te.Tensor) -> te.Tensor:
    """TE of ``dense_bias``: ``x @ w^T + b`` for ``b [N]`` (broadcast over rows)."""
    y = _gemm(x, w, "dense")
    return te.compute(y.shape, lambda *i: y[i] + b[i[-1]], name="dense_bias")


def rms_norm_dense_te(x: te.Tensor, g: te.Tensor, w: te.Tensor, eps: float) -> te.Tensor:
    """TE of ``rms_norm_dense``: ``rms_norm(x, g, eps) @ w^T`` in one PrimFunc.

    ``x [..., K]``, ``g [K]``, ``w [N, K]`` -> ``[..., N]``.  Per row, the scale
    ``rsqrt(sum(x^2) / K + eps)`` is computed first; the GEMM reads ``x * g`` and the
    scale multiplies each output (RMSNorm, Zhang and Sennrich 2019: ``x / rms(x) * g``).
    """
    size = x.shape[-1]
    k = te.reduce_axis((0, size), name="k")
    sumsq = te.compute(
        x.shape[:-1], lambda *i: te.sum(x[(*i, k)] * x[(*i, k)], axis=k), name="sumsq"
    )
    scale = te.compute(
        x.shape[:-1],
        lambda *i: te.rsqrt(sumsq[i] / te.const(int(size), x.dtype) + te.const(eps, x.dtype)),
        name="rms_scale",
    )
    j = te.reduce_axis((0, size), name="j")
    y = te.compute(
        (*x.shape[:-1], w.shape[0]),
        lambda *i: te.sum(x[(*i[:-1], j)] * g[j] * w[i[-1], j], axis=j),
        name="dense",
    )
    return te.compute(y.shape, lambda *i: y[i] * scale[i[:-1]], name="rms_norm_dense")


def gqa_scores_te(q: te.Tensor, k: te.Tensor) -> te.Tensor:
    """TE of ``gqa_scores``: ``q [B, H, S, D]``, ``k [B, KV, L, D]`` -> ``[B, H, S, L]``.

    ``out[b, h, s, l] = sum_d q[b, h, s, d] * k[b, h // n, l, d]`` with ``n = H // KV``:
    grouped-query attention's scores (Ainslie et al. 2023) read each K head once for
    its ``n`` query heads instead of a repeated copy.
    """
    return _grouped_product(q, k, "gqa_scores", keys_last=True)


def gqa_scores_packed_te(q: te.Tensor, k: te.Tensor, block: int) -> te.Tensor:
    """TE of ``gqa_scores_packed``: ``gqa_scores(q, k)`` from keys packed in the kernel.

    ``q [B, H, S, D]``, ``k [B, KV, L, D]`` with ``L % block == 0`` -> ``[B, H, S, L]``.
    First ``kp[b, g, i, d, j] = k[b, g, i * block + j, d]`` (``[B, KV, L / block, D, block]``,
    the layout of :func:`dense_packed_te`'s weight), then
    ``out[b, h, s, l] = sum_d q[b, h, s, d] * kp[b, h // n, l // block, d, l % block]``,
    so ``block`` consecutive keys are read as one contiguous vector instead of ``D``
    elements apart.
    """
    batch, kv_heads, keys, dim = k.shape
    packed = te.compute((batch, kv_heads, keys // block, dim, block),
                        lambda b, g, i, d, j: k[b, g, i * block + j, d], name="keys_packed")
    group = q.shape[1] // kv_heads
    r = te.reduce_axis((0, dim), name="r")
    return te.compute(
        (q.shape[0], q.shape[1], q.shape[2], keys),
        lambda b, h, s, l: te.sum(q[b, h, s, r] * packed[b, h // group, l // block, r, l % block], axis=r),
        name="gqa_scores_packed",
    )


def gqa_context_te(p: te.Tensor, v: te.Tensor) -> te.Tensor:
    """TE of ``gqa_context``: ``p [B, H, S, L]``, ``v [B, KV, L, D]`` -> ``[B, H, S, D]``.

    ``out[b, h, s, d] = sum_l p[b, h, s, l] * v[b, h // n, l, d]`` with ``n = H // KV``.
    """
    return _grouped_product(p, v, "gqa_context", keys_last=False)


def attention_te(q: te.Tensor, k: te.Tensor, v: te.Tensor, mask: te.Tensor, scale: float,
                 fast: bool = False) -> te.Tensor:
    """TE of ``attention`` (``fast_attention`` when ``fast``): grouped-query attention in one PrimFunc.

    ``q [B, H, S, D]``, ``k [B, KV, L, D]``, ``v [B, KV, L, Dv]``, ``mask`` of rank 4 or less
    broadcasting to ``[B, H, S, L]`` (right-aligned, NumPy rules), all one float dtype
    -> ``[B, H, S, Dv]``. With ``n = H // KV`` and ``z = scale * (q @ k[:, h // n]^T) + mask``:
    ``out = (exp(z - max_l z) @ v[:, h // n]) / sum_l exp(z - max_l z)``, which is
    ``softmax(z) @ v`` with the division by the row sum applied to the ``Dv`` outputs
    instead of the ``L`` probabilities (as FlashAttention does, Dao et al. 2022).
    ``fast`` uses ``topi.fast_exp`` (float32 only, see :func:`fast_softmax_te`).
    Blocks: ``scores``, ``logits``, ``row_max``, ``shifted``, ``exp``, ``row_sum``,
    ``context``, ``attention``.
    """
    batch, heads, rows, dim = q.shape
    keys, group = k.shape[2], heads // k.shape[1]
    mask_at = _broadcast_reader(mask, 4)

    d = te.reduce_axis((0, dim), name="d")
    scores = te.compute((batch, heads, rows, keys),
                        lambda b, h, s, j: te.sum(q[b, h, s, d] * k[b, h // group, j, d], axis=d), name="scores")
    const = tirx.const(scale, q.dtype)
    logits = te.compute(scores.shape, lambda b, h, s, j: scores[b, h, s, j] * const + mask_at(b, h, s, j),
                        name="logits")
    j1 = te.reduce_axis((0, keys), name="j1")
    row_max = te.compute((batch, heads, rows), lambda b, h, s: te.max(logits[b, h, s, j1], axis=j1), name="row_max")
    shifted = te.compute(scores.shape, lambda b, h, s, j: logits[b, h, s, j] - row_max[b, h, s], name="shifted")
    exp = topi.fast_exp(shifted) if fast else te.compute(scores.shape, lambda *i: te.exp(shifted[i]), name="exp")
    j2 = te.reduce_axis((0, keys), name="j2")
    row_sum = te.compute((batch, heads, rows), lambda b, h, s: te.sum(exp[b, h, s, j2], axis=j2), name="row_sum")
    j3 = te.reduce_axis((0, keys), name="j3")
    context = te.compute((batch, heads, rows, v.shape[3]),
                         lambda b, h, s, e: te.sum(exp[b, h, s, j3] * v[b, h // group, j3, e], axis=j3),
                         name="context")
    return te.compute(context.shape, lambda b, h, s, e: context[b, h, s, e] / row_sum[b, h, s], name="attention")


def rotary_dense_te(x: te.Tensor, wp: te.Tensor, cos: te.Tensor, sin: te.Tensor,
                    heads: tuple[int, ...], g: te.Tensor | None = None, eps: float = 0.0) -> te.Tensor:
    """TE of ``rotary_dense`` (``rotary_norm_dense`` when ``g`` is given): a projection,
    its head split and rotary position embedding in one PrimFunc.

    ``x [..., K]`` (``M`` rows in all), ``wp [N / b, K, b]`` (``W [N, K]`` packed as for
    :func:`dense_packed_te`), ``heads = (B, S, H, D)`` with ``B * S = M`` and
    ``H * D = N``, ``cos`` and ``sin`` of rank 4 or less broadcasting to ``[B, H, S, D]``,
    ``g [D]``; one float dtype -> ``[B, H, S, D]``.  With ``y = x @ W^T`` as ``[M, H, D]``,
    optionally normalised per head (``y * rsqrt(mean_d(y^2) + eps) * g``, RMSNorm, Zhang
    and Sennrich 2019), ``out[b, h, s, d] = y[m, h, d] * cos + sign(d) * y[m, h, (d + D/2)
    % D] * sin`` with ``m = b * S + s`` and ``sign`` -1 on the first half of ``D``, +1 on the
    second: ``y * cos + rotate_half(y) * sin`` (RoFormer, Su et al. 2021, as transformers
    computes it).  Blocks: ``T_reshape`` (``x`` as ``[M, K]``, when not 2-D), ``dense_packed``, with ``g``
    ``sumsq`` and ``rms_scale``, then ``rotary``.
    """
    batch, seq, n_heads, dim = heads
    rows = batch * seq
    x2 = x if len(x.shape) == 2 else topi.reshape(x, (rows, x.shape[-1]))
    y = dense_packed_te(x2, wp)
    half = dim // 2
    if g is None:
        def normed(m: Any, h: Any, d: Any) -> Any:
            return y[m, h * dim + d]
    else:
        j = te.reduce_axis((0, dim), name="j")
        sumsq = te.compute((rows, n_heads), lambda m, h: te.sum(y[m, h * dim + j] * y[m, h * dim + j], axis=j),
                           name="sumsq")
        scale = te.compute(
            (rows, n_heads),
            lambda m, h: te.rsqrt(sumsq[m, h] / te.const(dim, x.dtype) + te.const(eps, x.dtype)),
            name="rms_scale",
        )

        def normed(m: Any, h: Any, d: Any) -> Any:
            return y[m, h * dim + d] * scale[m, h] * g[d]
    cos_at, sin_at = _broadcast_reader(cos, 4), _broadcast_reader(sin, 4)
    one = tirx.const(1.0, x.dtype)

    def rotate(b: Any, h: Any, s: Any, d: Any) -> Any:
        m = b * seq + s
        sign = tirx.Select(d < half, -one, one)
        return (normed(m, h, d) * cos_at(b, h, s, d)
                + sign * normed(m, h, (d + half) % dim) * sin_at(b, h, s, d))

    return te.compute((batch, n_heads, seq, dim), rotate, name="rotary")


def _broadcast_reader(t: te.Tensor, rank: int) -> Any:
    """``read(*i)``: ``t`` (rank ``rank`` or less) at the index ``i`` of the ``rank``-D
    shape it broadcasts to (right-aligned, NumPy rules: size-1 axes read index 0)."""
    pad = rank - len(t.shape)

    def read(*i: Any) -> Any:
        return t[tuple(0 if int(n) == 1 else x for x, n in zip(i[pad:], t.shape))]

    return read


def _grouped_product(a: te.Tensor, kv: te.Tensor, name: str, keys_last: bool) -> te.Tensor:
    """``a [B, H, S, R] @ kv[:, h // n]`` (transposed when ``keys_last``) over ``R``."""
    group = a.shape[1] // kv.shape[1]
    r = te.reduce_axis((0, a.shape[3]), name="r")

    def read(b: Any, h: Any, j: Any) -> Any:
        return kv[b, h // group, j, r] if keys_last else kv[b, h // group, r, j]

    return te.compute(
        (a.shape[0], a.shape[1], a.shape[2], kv.shape[2] if keys_last else kv.shape[3]),
        lambda b, h, s, j: te.sum(a[b, h, s, r] * read(b, h, j), axis=r),
        name=name,
    )

"""A term -> a Relax ``IRModule`` with the original ``main`` signature.

The new ``main`` has the same parameters (names, types, order), attributes and output
structure as the translated one; the module's other functions are kept.  Parameters,
constants and tuples are read from the side tables; opaque nodes re-emit their original
call with the new arguments; every other constructor is lowered by its entry in the
operator table (:data:`extract.ops.OPS`): a Relax op, or a kernel as one TE PrimFunc
(:mod:`extract.ops.kernels`).  The :class:`Lowerer` keeps what several nodes share:

- the parts of a merged GEMM (``merged_dense`` and kin, the nodes sharing ``x`` and the
  concatenated weight): the whole GEMM once (its entry's lowering), one
  ``relax.op.split``, each part an item of the split;
- a weight packed into ``[N / b, K, b]`` by ``relax.op.reshape`` and
  ``relax.op.permute_dims`` (work on a weight alone, which
  :func:`tuner.compile.prepare_weights` moves out of the per-run function), once per
  weight and block.
"""

from __future__ import annotations

from typing import Any

import tvm
from egglog.deconstruct import get_literal_value
from tvm import relax

from .lang import Tensor, node_args, node_name
from .ops import OPS, LoweringError, Op
from .translate import Hole, OpaqueSpec, Translation, static_shape

__all__ = ["Lowerer", "LoweringError", "emit_function", "lower"]


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
            lowerer = Lowerer(
                bb, translation, dict(zip(translation.param_names, params, strict=True))
            )
            out = lowerer.value(term, root=True)
            gv = bb.emit_output(out)
        bb.emit_func_output(gv)
    return bb.get().get_global_var(name)


class Lowerer:
    """Emits the Relax of a term's nodes into ``bb``, children first, each distinct subterm once.

    The operator table's lowerings (:data:`extract.ops.op.Lower`) use ``bb``,
    :meth:`values`, :meth:`scalar` and :meth:`packed`.
    """

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
        if name == "Tensor.var":
            return self.params[_lit(args[0])]
        if name == "Tensor.const":
            return self._table(self.tr.consts, _lit(args[0]))
        if name == "Tensor.opaque":
            spec = self._table(self.tr.opaques, _lit(args[1]))
            children = self.values(args[2])
            if len(children) != _holes(spec.args):
                raise LoweringError(
                    f"opaque {_lit(args[0])} takes {_holes(spec.args)} tensors, "
                    f"the term gives {len(children)}"
                )
            return self._opaque(spec, children)
        if name == "make_tuple":
            fields = relax.Tuple(self.values(args[0]))
            return fields if root else self.bb.emit(fields)
        v = [self.memo[a.__egg_typed_expr__] if _is_tensor(a) else a for a in args]
        op = OPS.get(name or "")
        if op is None or op.lower is None:
            raise LoweringError(f"cannot lower node {name!r}")
        if op.merged_begin is not None:
            return self._merged_part(op, term, args, v)
        return op.lower(self, term, args, v)

    def values(self, vec: Any) -> list[Any]:
        """The Relax expressions of the tensors of a ``Vec[Tensor]`` argument, in order."""
        return [self.memo[a.__egg_typed_expr__] for a in node_args(vec)]

    def scalar(self, term: Any) -> float:
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

    def packed(self, weight: Any, block: int) -> Any:
        """The weight term's value ``[N, K]`` packed into ``[N / block, K, block]``
        (emitted once per weight and block)."""
        key = (weight.__egg_typed_expr__, block)
        if key not in self.packs:
            w = self.memo[weight.__egg_typed_expr__]
            rows, cols = static_shape(w.ty)
            blocks = self.bb.emit(relax.op.reshape(w, [rows // block, block, cols]))
            self.packs[key] = self.bb.emit(relax.op.permute_dims(blocks, [0, 2, 1]))
        return self.packs[key]

    def _merged_part(self, op: Op, term: Any, args: tuple, v: list) -> Any:
        """One part (output columns ``[begin, end)``) of a merged GEMM: the whole GEMM
        (``op.lower``) and its split are emitted once per merge, which the arguments before
        ``begin`` name."""
        at = op.merged_begin
        group = (op.name, *(a.__egg_typed_expr__ for a in args[:at]))
        if group not in self.splits:
            weights = node_args(node_args(args[1])[0]) if node_name(args[1]) == "concat" else ()
            rows = [static_shape(self.memo[w.__egg_typed_expr__].ty) for w in weights]
            product = op.lower(self, term, args, v)
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
        begin, end = _lit(args[at]), _lit(args[at + 1])
        if parts is not None and begin in bounds and bounds.index(begin) + 1 < len(bounds):
            index = bounds.index(begin)
            if bounds[index + 1] == end:
                return self.bb.emit(relax.TupleGetItem(parts, index))
        ndim = len(static_shape(product.ty) or ())
        return self.bb.emit(
            relax.op.strided_slice(product, axes=[ndim - 1], begin=[begin], end=[end])
        )


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

"""The operator table covers the term language and is consistent with it."""

from __future__ import annotations

from egglog.declarations import CallDecl

import extract.lang as lang
from extract.lang import decl_name
from extract.ops import NODE_NAMES, OPS, REWRITE_NODES, SECOND_FAMILY
from extract.rules import FAMILIES


def _tensor_constructors() -> set[str]:
    """Names (as egglog prints them) of the constructors of :mod:`extract.lang` returning a Tensor."""
    names = set()
    for fn in [getattr(lang, n) for n in lang.__all__] + [lang.Tensor.var, lang.Tensor.const, lang.Tensor.opaque]:
        ref = getattr(fn, "__egg_ref__", None)
        if ref is None:
            continue
        decl = fn.__egg_decls__.get_callable_decl(ref)
        if str(decl.signature.semantic_return_type) == "Tensor":
            names.add(decl_name(CallDecl(ref)))
    return names


def test_every_constructor_has_one_entry():
    assert _tensor_constructors() == set(OPS) == NODE_NAMES


def test_only_leaves_and_tuples_are_lowered_by_the_lowerer():
    assert {name for name, op in OPS.items() if op.lower is None} == {
        "Tensor.var", "Tensor.const", "Tensor.opaque", "make_tuple"
    }


def test_families_are_rewrite_families():
    known = set(FAMILIES) | {"merge"}
    assert set(REWRITE_NODES.values()) <= known
    assert set(SECOND_FAMILY.values()) <= known
    assert {name for name, op in OPS.items() if op.merged_begin is not None} <= {
        name for name, family in REWRITE_NODES.items() if family == "merge"
    }

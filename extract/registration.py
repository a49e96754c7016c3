"""Putting a translated program into an egglog e-graph, and checking that it got there.

egglog 13.2 sometimes builds a different e-graph than the term it is given.  egglog's
Python layer sends a term with shared subterms as a series of global ``let`` bindings,
and for some of those series the engine binds a subterm with the wrong argument in
place (an operator name where a key belongs, another tensor as an operand): extra
e-nodes, wrong facts, or a stop with "Illegal merge attempted for function shape".
Which series go wrong depends on the order the Python layer visits the term in, which
varies from one process to the next (a few processes in a hundred; see
docs/decisions.md, "Checking what egglog registered"), and replaying a series that went
wrong in a new engine goes wrong the same way.

So :func:`register` checks what it built: every e-class must hold exactly one e-node,
the e-nodes must be the program's subterms one for one (compared by structure), and the
shape, dtype and order of each must be the translation's.  When the check fails it
registers the program again in a fresh e-graph, sending it another way (subterm by
subterm, children first), and raises :class:`RegistrationError` if no way gives the
program.
"""

from __future__ import annotations

import logging
from typing import Any

from egglog import EGraph, i64, set_
from egglog.bindings import EggSmolError
from egglog.declarations import CallDecl, LitDecl, ValueDecl
from egglog.deconstruct import get_literal_value

from .lang import decl_name, e_class_facts, node_args, node_name, program_root, subterms
from .translate import Translation

__all__ = ["RegistrationError", "register"]

_LOG = logging.getLogger(__name__)


class RegistrationError(RuntimeError):
    """egglog did not build the e-graph of the program, whichever way it was sent."""


def register(translation: Translation) -> EGraph:
    """A new e-graph holding ``translation``'s term and facts, checked.

    Parameters
    ----------
    translation : Translation
        The program's term, facts (egglog actions) and fact values.  Call it inside
        :func:`extract.saturate.recursion_room` for deep terms.

    Returns
    -------
    egglog.EGraph
        An e-graph whose e-classes are exactly the program's subterms, with their facts
        and the program root marked.

    Raises
    ------
    RegistrationError
        Every way of sending the program gave a different e-graph (or an egglog error).
    """
    expected = _Program(translation)
    problems = []
    for name, send in _WAYS:
        egraph = EGraph()
        try:
            send(egraph, translation)
            problem = _check(egraph, expected)
        except EggSmolError as exc:
            problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if problem is None:
            if problems:
                _LOG.info("e-graph registered %s after: %s", name, "; ".join(problems))
            return egraph
        # Free the wrong e-graph here, on this thread: an egglog e-graph may only be
        # dropped on the thread that made it, and a traceback would keep it alive.
        del egraph
        problems.append(f"{name}: {problem}")
    raise RegistrationError(
        "egglog built a different e-graph than the program each way it was sent ("
        + "; ".join(problems)
        + ")"
    )


def _whole(egraph: EGraph, tr: Translation) -> None:
    egraph.register(tr.root, *_facts(tr))


def _children_first(egraph: EGraph, tr: Translation) -> None:
    egraph.register(*subterms(tr.root))
    egraph.register(*_facts(tr))


def _facts(tr: Translation) -> list:
    """The translation's facts and the mark on the program's root."""
    return [*tr.facts, set_(program_root(tr.root)).to(i64(1))]


_WAYS = (("as one term", _whole), ("subterm by subterm", _children_first))


class _Program:
    """The program as structural ids: one id per distinct subterm, and its facts.

    The subterms are those of the root and of every value a fact is about (a binding the
    output does not use still has its shape and dtype set, so it is in the e-graph).
    """

    def __init__(self, tr: Translation) -> None:
        self.ids: dict[tuple, int] = {}
        by_term: dict[Any, int] = {}
        for top in (tr.root, *(t for t, _, _ in tr.fact_values)):
            if top.__egg_typed_expr__ in by_term:
                continue
            for term in subterms(top):
                if term.__egg_typed_expr__ in by_term:
                    continue
                key = (node_name(term), tuple(_term_arg(a, by_term) for a in node_args(term)))
                by_term[term.__egg_typed_expr__] = self.ids.setdefault(key, len(self.ids))
        self.facts = {(kind, by_term[t.__egg_typed_expr__]): v for t, kind, v in tr.fact_values}
        self.facts[("program_root", by_term[tr.root.__egg_typed_expr__])] = 1


def _term_arg(arg: Any, by_term: dict[Any, int]) -> Any:
    typed = arg.__egg_typed_expr__
    if typed.tp.ident.name == "Tensor":
        return ("t", by_term[typed])
    if (node_name(arg) or "").startswith("Vec"):
        return tuple(_term_arg(a, by_term) for a in node_args(arg))
    return get_literal_value(arg)


def _check(egraph: EGraph, program: _Program) -> str | None:
    """None when ``egraph`` holds exactly ``program``, else what differs (one line)."""
    frozen = egraph.freeze().decl
    classes = {v: calls for v, (tp, calls) in frozen.e_classes.items() if tp.ident.name == "Tensor"}
    crowded = sum(1 for calls in classes.values() if len(calls) != 1)
    if crowded:
        return f"{crowded} e-classes with more than one e-node"
    if len(classes) != len(program.ids):
        return f"{len(classes)} e-classes for {len(program.ids)} subterms"
    ids: dict[Any, int] = {}
    entered: set = set()
    for start in classes:
        stack = [start]
        while stack:  # children first, iteratively: terms can be deep
            value = stack[-1]
            if value in ids:
                stack.pop()
                continue
            call = classes[value][0]
            children = _child_classes(call)
            if any(c not in classes for c in children):
                return "an e-node refers to an e-class outside the program"
            todo = [c for c in children if c not in ids]
            if todo:
                if value in entered:
                    return "the e-graph has a cycle"
                entered.add(value)
                stack.extend(todo)
                continue
            stack.pop()
            key = (decl_name(call), tuple(_decl_arg(a, ids) for a in call.args))
            found = program.ids.get(key)
            if found is None:
                return f"an e-node that is no subterm of the program ({decl_name(call)})"
            ids[value] = found
    if len(set(ids.values())) != len(ids):
        return "two e-classes hold the same subterm"
    facts = {
        (kind, ids[value]): fact
        for (kind, value), fact in e_class_facts(frozen).items()
        if kind in ("shape", "dtype", "order", "program_root") and value in ids
    }
    if facts != program.facts:
        wrong = sum(1 for k, v in program.facts.items() if facts.get(k) != v)
        return f"{wrong + len(set(facts) - set(program.facts))} shape, dtype or order facts differ"
    return None


def _child_classes(call: CallDecl) -> list[Any]:
    out = []
    for arg in call.args:
        if isinstance(arg.expr, ValueDecl) and arg.tp.ident.name == "Tensor":
            out.append(arg.expr.value)
        elif isinstance(arg.expr, CallDecl):
            out.extend(_child_classes(arg.expr))
    return out


def _decl_arg(arg: Any, ids: dict[Any, int]) -> Any:
    expr = arg.expr
    if isinstance(expr, ValueDecl) and arg.tp.ident.name == "Tensor":
        return ("t", ids[expr.value])
    if isinstance(expr, CallDecl):
        return tuple(_decl_arg(a, ids) for a in expr.args)
    if isinstance(expr, LitDecl):
        return expr.value
    return repr(expr)


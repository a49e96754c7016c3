"""Extraction: candidate programs out of a saturated e-graph.

Costs are latencies in seconds.  An e-node costs what ``node_cost`` says for it (or
:func:`default_node_cost`), and a term costs the sum over its *distinct* e-nodes (a DAG
cost: a subterm used twice is computed once).  This follows egglog's monotonicity rule:
every e-node costs at least a tiny positive amount, so a term always costs more than
each of its subterms and extraction never picks a cycle.

A merged GEMM is several ``merged_dense`` e-nodes (one per part); each part is charged
the merged GEMM's cost times its share of the output columns.  That keeps costs
per e-node, so greedy extraction chooses the merge part by part and takes it when the
merged GEMM is cheaper than the separate ones.

:func:`enumerate_candidates` returns the original program and the programs chosen
under several strategies (all rewrites allowed, or some families forbidden), without
duplicates; :func:`extract_best` returns the cheapest program under a caller's costs.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tvm
from egglog import EGraph
from egglog.declarations import CallDecl, ValueDecl

from .lang import Tensor, decl_name, e_class_facts, node_args, node_name, subterms
from .lowering import LoweringError, lower
from .ops import FAST_EXP_GAIN, OPS, PACKED_GAIN, REWRITE_NODES, ROTARY_FUSED_SLOWDOWN
from .rules import FAMILIES
from .saturate import ProgramEGraph, recursion_room

__all__ = [
    "DEFAULT_BYTES_PER_S",
    "DEFAULT_FLOPS_PER_S",
    "FAST_EXP_GAIN",
    "PACKED_GAIN",
    "ROTARY_FUSED_SLOWDOWN",
    "STRATEGIES",
    "CandidateGraph",
    "LatencyCostModel",
    "NodeCost",
    "candidate_from_term",
    "default_node_cost",
    "enumerate_candidates",
    "extract_best",
]

_LOG = logging.getLogger(__name__)

Shape = tuple[int, ...]
NodeCost = Callable[[str, "Shape | None", "str | None", "list[Shape | None]"], "float | None"]
"""``node_cost(op_name, out_shape, dtype, arg_shapes) -> seconds or None``.

``op_name`` is the constructor name (``"dense"``, ``"matmul"``, ``"rms_norm_dense"``...)
or, for opaque nodes, the Relax op name (``"relax.nn.softmax"``).  ``out_shape`` and the
``arg_shapes`` of the tensor arguments are static shapes or None when unknown; ``dtype``
is the output dtype.  For ``"merged_dense"`` and ``"merged_dense_bias"`` the shapes are
those of the whole merged GEMM (``[..., sum N]`` and the concatenated weight ``[sum N, K]``).  None means "use
:func:`default_node_cost`".  Leaves, tuples and tuple items are not asked (they are free).
"""

EPSILON_S = 1e-12
"""Least cost of a computing e-node, so a term costs more than any of its subterms."""
FORBIDDEN_S = 1e3
"""Added to e-nodes of forbidden rewrite families: far above any real program latency."""

# Default latency model: a kernel launch plus the larger of memory and compute time.
_LAUNCH_S = 2e-6
DEFAULT_BYTES_PER_S = 20e9
"""Memory bandwidth (bytes/s) of the default latency model: a nominal CPU, not a measurement."""
DEFAULT_FLOPS_PER_S = 100e9
"""Peak FLOP/s of the default latency model: a nominal CPU, not a measurement."""


def default_node_cost(
    op_name: str, out_shape: Shape | None, dtype: str | None, arg_shapes: Sequence[Shape | None]
) -> float:
    """A rough latency in seconds: launch + max(bytes / bandwidth, flops / peak).

    What each operator computes is its entry in :data:`extract.ops.OPS`.  Reshapes and
    weight concatenation (a load-time layout change) are free.  GEMM-like nodes count
    ``2 * out * K`` flops per product they compute, others one flop per output element;
    GEMMs on packed weights or packed keys run :data:`PACKED_GAIN` times faster (both
    terms), softmax and SiLU with ``fast_exp`` :data:`FAST_EXP_GAIN` times,
    a projection with its rotary embedding :data:`ROTARY_FUSED_SLOWDOWN` times slower.
    A fused attention counts its two products' flops, moves its inputs and output only
    (not the scores), and adds the time of a softmax over its scores (two passes over
    them in memory; ``fast_attention`` :data:`FAST_EXP_GAIN` times less).
    Unknown shapes cost one launch.
    """
    op = OPS.get(op_name)
    if op is not None and (op.free or not op.priced):
        return 0.0
    if out_shape is None:
        return _LAUNCH_S
    try:
        itemsize = np.dtype(dtype or "float32").itemsize
    except TypeError:
        itemsize = 4
    out = math.prod(out_shape)
    moved = out + sum(math.prod(s) for s in arg_shapes if s is not None)
    work = op.work(out_shape, arg_shapes) if op is not None and op.work is not None else None
    flops = float(out) if work is None else work.flops
    gain = 1.0 if op is None else op.prior_gain
    softmax_s = 0.0
    if work is not None and work.softmax:
        softmax_s = 2 * itemsize * work.softmax / DEFAULT_BYTES_PER_S / op.softmax_gain
    return _LAUNCH_S + max(itemsize * moved / DEFAULT_BYTES_PER_S, flops / DEFAULT_FLOPS_PER_S) / gain + softmax_s


@dataclass(frozen=True)
class CandidateGraph:
    """One program extracted from the e-graph.

    Attributes
    ----------
    term_text : str
        Canonical text of the term (egglog's printer; shared subterms are named once).
    term_hash : str
        Hex SHA-256 of ``term_text``.
    rewrites : tuple of str
        Rewrite families whose nodes the term has more of than the original program, in
        :data:`extract.rules.FAMILIES` order: ``transpose_fold`` (plain ``dense``),
        ``merge_qkv`` / ``merge_pair`` (parts of merged GEMMs of three / two weights),
        ``silu``, ``epilogue_silu_mul``, ``epilogue_add``, ``epilogue_bias``,
        ``rms_norm`` (a recognised RMSNorm kept as one op), ``prologue_rms_norm``,
        ``gqa_attention`` (attention products without the repeated K and V),
        ``key_layout`` (scores from packed keys), ``weight_layout`` (GEMMs on packed
        weights), ``fast_exp`` (softmax and SiLU with TVM's ``fast_exp``),
        ``fused_attention`` (attention as one kernel), ``rotary`` (a recognised rotary
        embedding kept as one op), ``epilogue_rotary`` (rotary embedding in the Q/K
        projection's kernel).  A
        merged or fused GEMM counts for its own family only, though it also folds the
        transpose.
    mod : tvm.IRModule
        The Relax program rebuilt from the term; same ``main`` signature as the original.
    strategy : str
        How it was chosen: ``"original"``, a :data:`STRATEGIES` name, ``"best"``
        (greedy) or ``"exact"`` (:func:`extract.exact.extract_exact`).
    cost : float or None
        Its cost in seconds under the cost model that chose it (None for the original).
    term : Tensor or None
        The extracted term itself (for walking it; not part of equality).  None for a
        program of deduplicated layers (:mod:`extract.dedup`), whose terms are in
        ``layer_terms``.
    layer_terms : tuple of Tensor
        For a program of deduplicated layers, the term of each distinct layer (the same
        choice is applied to every layer identical to it); empty otherwise.
    """

    term_text: str
    term_hash: str
    rewrites: tuple[str, ...]
    mod: tvm.IRModule = field(repr=False, compare=False)
    strategy: str = ""
    cost: float | None = None
    term: Tensor | None = field(default=None, repr=False, compare=False)
    layer_terms: tuple[Tensor, ...] = field(default=(), repr=False, compare=False)


_MERGE = frozenset({"transpose_fold", "merge", "key_layout", "weight_layout", "fast_exp"})
STRATEGIES: dict[str, frozenset[str]] = {
    "all": frozenset(REWRITE_NODES.values()),
    "merge": _MERGE | {"gqa_attention"},
    "attention": _MERGE | {"fused_attention"},
    "transpose_fold": frozenset({"transpose_fold"}),
    "epilogue": frozenset(
        {"transpose_fold", "silu", "epilogue_silu_mul", "epilogue_add", "epilogue_bias",
         "gqa_attention", "fast_exp"}
    ),
    "prologue": frozenset(
        {"transpose_fold", "rms_norm", "prologue_rms_norm", "gqa_attention", "fast_exp"}
    ),
    "none": frozenset(),
}
"""Extraction strategies for :func:`enumerate_candidates`, in the order candidates are
enumerated: the rewrite families each allows (node families of
:data:`extract.ops.REWRITE_NODES`; the others are forbidden).  Attention without the
repeated K and V (``gqa_attention``) only removes work, so every strategy that fuses
allows it, and so does TVM's vectorisable ``fast_exp`` in softmax and SiLU
(``fast_exp``), which every candidate's numerical check vets.  ``merge`` and
``attention`` differ only in attention: ``attention`` forbids the decomposed products,
so it extracts attention as one fused kernel (``fused_attention``) where the rule
matched, and the two are measured side by side.  Packed weights (``weight_layout``)
come with the merges, and so do packed keys (``key_layout``), so ``transpose_fold``
stays the candidate with every weight and activation in its stored layout."""


class _DagCost:
    """Cost of a term: the sum over its distinct e-nodes, with their costs kept."""

    __slots__ = ("parts", "total")

    def __init__(self, parts: dict[Any, float]) -> None:
        self.parts = parts
        self.total = math.fsum(parts.values())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _DagCost) and self.total == other.total

    def __hash__(self) -> int:
        return hash(self.total)

    def __lt__(self, other: _DagCost) -> bool:
        return self.total < other.total

    def __le__(self, other: _DagCost) -> bool:
        return self.total <= other.total

    def __gt__(self, other: _DagCost) -> bool:
        return self.total > other.total

    def __ge__(self, other: _DagCost) -> bool:
        return self.total >= other.total


_ZERO = _DagCost({})


class LatencyCostModel:
    """An egglog ``CostModel`` pricing e-nodes with a ``node_cost`` function.

    Parameters
    ----------
    state : ProgramEGraph
        The e-graph to extract from; its shapes are read once, at construction, so
        build the model after saturation.
    node_cost : NodeCost, optional
        Latency of an e-node in seconds, None for "use the default".  Negative values
        are taken as zero.
    allowed : frozenset of str, optional
        Rewrite node families allowed (see :data:`extract.ops.REWRITE_NODES`); e-nodes
        of the other families cost :data:`FORBIDDEN_S` more.  Default: all.
    pinned : frozenset, optional
        E-node declarations (as in :meth:`nodes`) to extract; every other tensor e-node
        costs :data:`FORBIDDEN_S` more.  Used to read back an exact (ILP) solution.

    Notes
    -----
    ``node_cost`` is asked once per distinct signature (operator, output shape, dtype,
    argument shapes), not once per e-node: the identical decoder layers of a model are
    priced once (:attr:`calls` counts the questions asked).
    """

    def __init__(
        self,
        state: ProgramEGraph,
        node_cost: NodeCost | None = None,
        allowed: frozenset[str] | None = None,
        pinned: frozenset | None = None,
    ) -> None:
        self.node_cost = node_cost
        self.allowed = frozenset(REWRITE_NODES.values()) if allowed is None else allowed
        self.pinned = pinned
        self.calls = 0
        self._by_signature: dict[tuple, float] = {}
        frozen = state.egraph.freeze().decl
        self._class_of: dict[CallDecl, Any] = {}
        for value, (_tp, calls) in frozen.e_classes.items():
            for call in calls:
                self._class_of[call] = value
        facts = e_class_facts(frozen)
        self._shape: dict[Any, Shape] = {v: f for (name, v), f in facts.items() if name == "shape"}
        self._dtype: dict[Any, str] = {v: str(f) for (name, v), f in facts.items() if name == "dtype"}
        self._own: dict[CallDecl, float] = {}
        self._groups: dict[CallDecl, tuple[tuple, float]] = {}
        self._memo: dict[tuple, tuple[_DagCost, list[_DagCost]]] = {}
        self._nodes = [
            (value, call)
            for value, (tp, calls) in frozen.e_classes.items()
            if tp.ident.name == "Tensor"
            for call in calls
        ]

    def nodes(self) -> list[tuple[Any, CallDecl, list[Any], float]]:
        """Every tensor e-node: (its e-class, its declaration, child e-classes, cost in s)."""
        return [
            (value, call, self._tensor_values(call), self.own_cost(call))
            for value, call in self._nodes
        ]

    def own_cost(self, decl: CallDecl) -> float:
        """Cost in seconds of one e-node alone (its children not included)."""
        if decl not in self._own:
            self._own[decl] = self._price(decl)
        return self._own[decl]

    def merged_group(self, decl: CallDecl) -> tuple[tuple, float] | None:
        """For a part of a merged GEMM: (a key shared by the parts of that GEMM, the whole
        GEMM's cost in seconds); None for other e-nodes. :meth:`own_cost` charges a part only
        its share of the GEMM, which undercounts a part used without the others."""
        self.own_cost(decl)
        return self._groups.get(decl)

    def __call__(self, egraph: EGraph, expr: Any, children_costs: list[_DagCost]) -> _DagCost:
        decl = expr.__egg_typed_expr__.expr
        # The extractor asks again for the same children many times; the memo holds the
        # children, so their ids stay unique while it lives.
        key = (decl, *map(id, children_costs))
        hit = self._memo.get(key)
        if hit is not None:
            return hit[0]
        parts: dict[Any, float] = {}
        for child in children_costs:
            parts.update(child.parts)
        if isinstance(decl, CallDecl) and expr.__egg_typed_expr__.tp.ident.name == "Tensor":
            parts[decl] = self.own_cost(decl)
            if self.pinned is not None and decl not in self.pinned:
                parts[decl] += FORBIDDEN_S
        cost = _DagCost(parts) if parts else _ZERO
        self._memo[key] = (cost, children_costs)
        return cost

    def _price(self, decl: CallDecl) -> float:
        name = decl_name(decl)
        entry = OPS.get(name or "")
        if entry is not None and not entry.priced:
            return 0.0
        args = decl.args
        out = self._shape.get(self._class_of.get(decl))
        dtype = self._dtype.get(self._class_of.get(decl))
        arg_shapes = [self._shape.get(v) for v in self._tensor_values(decl)]
        share = 1.0
        op = name
        at = None if entry is None else entry.merged_begin  # a merged part's ``begin``
        if name == "Tensor.opaque":
            op = str(args[0].expr.value)
        elif at is not None:
            wcat = arg_shapes[1] if len(arg_shapes) > 1 else None
            begin, end = (int(a.expr.value) for a in args[at : at + 2])
            if out is not None and wcat:
                share = (end - begin) / wcat[0]
                out = (*out[:-1], wcat[0])
        signature = (op, out, dtype, tuple(arg_shapes))
        if signature not in self._by_signature:
            cost = None
            if self.node_cost is not None:
                self.calls += 1
                cost = self.node_cost(op, out, dtype, arg_shapes)
            if cost is None:
                cost = default_node_cost(op, out, dtype, arg_shapes)
            self._by_signature[signature] = max(float(cost), 0.0)
        cost = self._by_signature[signature] * share + EPSILON_S
        if at is not None and share < 1.0:
            self._groups[decl] = ((name, *args[:at]), self._by_signature[signature])
        family, second = (None, None) if entry is None else (entry.family, entry.second_family)
        if (family is not None and family not in self.allowed) or (
            second is not None and second not in self.allowed
        ):
            cost += FORBIDDEN_S
        return cost

    @staticmethod
    def _tensor_values(decl: CallDecl) -> list[Any]:
        values = []
        for arg in decl.args:
            if isinstance(arg.expr, ValueDecl) and arg.tp.ident.name == "Tensor":
                values.append(arg.expr.value)
            elif isinstance(arg.expr, CallDecl) and arg.tp.ident.name == "Vec":
                values.extend(a.expr.value for a in arg.expr.args if isinstance(a.expr, ValueDecl))
        return values


def candidate_from_term(
    state: ProgramEGraph,
    term: Tensor,
    strategy: str = "",
    cost: float | None = None,
    text: str | None = None,
) -> CandidateGraph:
    """Wrap a term of ``state``'s program as a :class:`CandidateGraph` (lowering it).

    ``text`` is ``str(term)`` when the caller has it already.
    """
    text = str(term) if text is None else text
    return CandidateGraph(
        term_text=text,
        term_hash=hashlib.sha256(text.encode()).hexdigest(),
        rewrites=rewrites_used(term, state.root),
        mod=lower(term, state.translation),
        strategy=strategy,
        cost=cost,
        term=term,
    )


def rewrites_used(term: Tensor, original: Tensor) -> tuple[str, ...]:
    """Rewrite families whose nodes ``term`` has more of than ``original``."""
    have, base = _family_counts(term), _family_counts(original)
    return tuple(f for f in FAMILIES if have[f] > base[f])


def _family_counts(term: Tensor) -> Counter:
    counts: Counter = Counter()
    for sub in subterms(term):
        entry = OPS.get(node_name(sub) or "")
        family = None if entry is None else entry.family
        if family == "merge":
            weights = (
                node_args(node_args(node_args(sub)[1])[0])
                if node_name(node_args(sub)[1]) == "concat"
                else ()
            )
            family = {3: "merge_qkv", 2: "merge_pair"}.get(len(weights), "merge")
        if family is not None:
            counts[family] += 1
        if entry is not None and entry.second_family is not None:
            counts[entry.second_family] += 1
    return counts


def _extract(state: ProgramEGraph, model: LatencyCostModel) -> tuple[Tensor, float]:
    """The cheapest term and its cost in seconds, each merged GEMM it uses paid whole once.

    The extractor compares e-nodes with a merged part charged its share of the GEMM (so
    that costs stay monotone); the cost returned is what the lowered program computes: a
    part used without the others still computes the whole GEMM."""
    term, cost = state.egraph.extract(state.root, include_cost=True, cost_model=model)
    total, groups = 0.0, {}
    for decl, part in cost.parts.items():
        found = model.merged_group(decl) if isinstance(decl, CallDecl) else None
        if found is None:
            total += part
        else:
            groups[found[0]] = found[1]
            total += part - model.own_cost(decl) + EPSILON_S  # keeps a forbidden or pinned surcharge
    return term, total + math.fsum(groups.values())


def _room(state: ProgramEGraph) -> Any:
    return recursion_room(state.enodes())


def extract_best(state: ProgramEGraph, node_cost: NodeCost | None = None) -> CandidateGraph:
    """The cheapest program under ``node_cost`` (greedy DAG extraction).

    Parameters
    ----------
    state : ProgramEGraph
        A saturated e-graph.
    node_cost : NodeCost, optional
        Latency of an e-node in seconds, None for the default; see :data:`NodeCost`.

    Returns
    -------
    CandidateGraph
        With ``strategy="best"`` and ``cost`` the predicted latency in seconds.
    """
    with _room(state):
        term, cost = _extract(state, LatencyCostModel(state, node_cost))
        return candidate_from_term(state, term, "best", cost)


def enumerate_candidates(state: ProgramEGraph, max_candidates: int = 4) -> list[CandidateGraph]:
    """Distinct candidate programs: the original first, then one per strategy.

    Parameters
    ----------
    state : ProgramEGraph
        A saturated e-graph.
    max_candidates : int
        At most this many candidates (>= 1), including the original.

    Returns
    -------
    list of CandidateGraph
        Distinct by ``term_hash``; strategies in :data:`STRATEGIES` order (the default
        latency model with the strategy's forbidden families), fewer when strategies
        extract the same program.  A term that cannot be lowered back to Relax is
        logged and skipped.
    """
    if max_candidates < 1:
        raise ValueError("max_candidates must be at least 1")
    with _room(state):
        candidates = [candidate_from_term(state, state.root, "original")]
        seen = {candidates[0].term_hash}
        for name, allowed in STRATEGIES.items():
            if len(candidates) >= max_candidates:
                break
            term, cost = _extract(state, LatencyCostModel(state, None, allowed))
            text = str(term)
            digest = hashlib.sha256(text.encode()).hexdigest()
            if digest in seen:
                continue
            seen.add(digest)
            try:
                candidates.append(candidate_from_term(state, term, name, cost, text))
            except LoweringError as exc:  # never expected; keep the other candidates
                _LOG.warning("skipping candidate %r: %s", name, str(exc).splitlines()[0])
        return candidates

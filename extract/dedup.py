"""Exploring a program of identical layers once per distinct layer.

A :class:`~extract.layers.LayerSplit` says which layers of ``main`` are identical.
:class:`LayeredProgram` keeps one e-graph per distinct layer: saturation and extraction
run on those only, so their cost grows with the number of distinct layers, not with the
depth.  A candidate of the whole program applies each distinct layer's extracted term to
every layer identical to it: each layer term is lowered once, as a private function, the
whole ``main`` is the prologue, one call per layer and the epilogue, and the calls are
inlined (``relax.transform.InlinePrivateFunctions``).  The prologue and epilogue (rotary
tables, causal mask, the output tuple) are kept as they are: no rewrite rule applies to
them.  Since each layer is the representative applied to that layer's own arguments, a
candidate computes exactly what the whole program's extracted term would.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import tvm
from tvm import relax

from .extraction import (
    STRATEGIES,
    CandidateGraph,
    LatencyCostModel,
    NodeCost,
    _extract,
    _room,
    rewrites_used,
)
from .lang import Tensor
from .layers import LayerSplit
from .lowering import LoweringError, emit_function
from .rules import FAMILIES
from .saturate import ProgramEGraph, SaturationLimits, SaturationReport, saturate

__all__ = ["LayerChoice", "LayeredProgram"]

_LOG = logging.getLogger(__name__)

LayerChoice = tuple[Tensor, float]
"""A distinct layer's extracted term and its DAG cost in seconds."""


@dataclass
class LayeredProgram:
    """The e-graphs of a split program's distinct layers.

    Attributes
    ----------
    split : LayerSplit
        Where the layers are and which are identical.
    states : list of ProgramEGraph
        One per :attr:`LayerSplit.groups` entry, in that order.
    """

    split: LayerSplit
    states: list[ProgramEGraph]

    @classmethod
    def from_split(cls, split: LayerSplit) -> LayeredProgram:
        """Translate each distinct layer into its own e-graph."""
        return cls(split, [ProgramEGraph.from_module(g.mod) for g in split.groups])

    def saturate(self, limits: SaturationLimits) -> SaturationReport:
        """Saturate each distinct layer's e-graph; the time limit is shared by all.

        Returns
        -------
        SaturationReport
            E-nodes, e-classes, seconds and rules fired summed over the distinct layers
            (rules counted once per distinct layer), the most iterations of any, the
            first limit reached (``"saturated"`` when none was); ``layers`` and
            ``distinct_layers`` set.
        """
        start = time.perf_counter()
        reports = []
        for state in self.states:
            left = max(0.0, limits.max_seconds - (time.perf_counter() - start))
            reports.append(saturate(state, replace(limits, max_seconds=left)))
        fired: dict[str, int] = {}
        for report in reports:
            for name, n in report.rules_fired.items():
                fired[name] = fired.get(name, 0) + n
        limited = [r.stop_reason for r in reports if r.stop_reason != "saturated"]
        return SaturationReport(
            iterations=max(r.iterations for r in reports),
            enodes=sum(r.enodes for r in reports),
            eclasses=sum(r.eclasses for r in reports),
            time_s=time.perf_counter() - start,
            stop_reason=limited[0] if limited else "saturated",
            rules_fired=fired,
            layers=len(self.split.layers),
            distinct_layers=len(self.split.groups),
        )

    def candidate(
        self, choices: Sequence[LayerChoice | Tensor], strategy: str
    ) -> CandidateGraph:
        """The whole program with each distinct layer replaced by its chosen term.

        Parameters
        ----------
        choices : sequence of (Tensor, float) or Tensor
            Per distinct layer, its term and cost in seconds (a bare term, the root,
            for the original program: no cost).
        strategy : str
            Recorded in the candidate.

        Returns
        -------
        CandidateGraph
            ``term_text`` lists each distinct layer's term with the layers it computes;
            ``cost`` is the sum over all layers (None for bare terms); ``term`` is None
            and ``layer_terms`` holds the per-distinct-layer terms.

        Raises
        ------
        extract.lowering.LoweringError
            A term has a node its layer's side tables do not know.
        """
        terms = [c[0] if isinstance(c, tuple) else c for c in choices]
        costs = [c[1] for c in choices if isinstance(c, tuple)]
        groups = self.split.groups
        text = _text(self.split, terms)
        used = set()
        for state, term in zip(self.states, terms, strict=True):
            used.update(rewrites_used(term, state.root))
        cost = None
        if len(costs) == len(terms):
            cost = sum(c * len(g.members) for c, g in zip(costs, groups, strict=True))
        return CandidateGraph(
            term_text=text,
            term_hash=hashlib.sha256(text.encode()).hexdigest(),
            rewrites=tuple(f for f in FAMILIES if f in used),
            mod=self.compose(terms),
            strategy=strategy,
            cost=cost,
            layer_terms=tuple(terms),
        )

    def compose(self, terms: Sequence[Tensor]) -> tvm.IRModule:
        """The whole program's Relax module with each distinct layer lowered from its term.

        ``main`` has the original signature; the layer functions are inlined.
        """
        split = self.split
        func = split.mod["main"]
        others = {gv: f for gv, f in split.mod.functions_items() if gv.name_hint != "main"}
        bb = relax.BlockBuilder(tvm.IRModule(others, attrs=split.mod.attrs))
        functions = [
            emit_function(bb, f"layer_{g}", term, state.translation, private=True)
            for g, (term, state) in enumerate(zip(terms, self.states, strict=True))
        ]
        attrs = {k: v for k, v in (func.attrs or {}).items() if k != "global_symbol"}
        with bb.function("main", list(func.params), attrs=attrs or None, pure=bool(func.is_pure)):
            with bb.dataflow():
                for binding in split.prologue:
                    bb.emit_normalized(binding)
                for layer in split.layers:
                    result = bb.emit(relax.Call(functions[layer.group], list(layer.args)))
                    for k, var in enumerate(layer.outputs):
                        bb.emit_normalized(relax.VarBinding(var, relax.TupleGetItem(result, k)))
                for binding in split.epilogue:
                    bb.emit_normalized(binding)
            bb.emit_func_output(func.body.body)
        return relax.transform.InlinePrivateFunctions()(bb.finalize())

    def extract(
        self, extract_one: Callable[[ProgramEGraph], LayerChoice], strategy: str
    ) -> CandidateGraph:
        """The candidate choosing each distinct layer with ``extract_one`` (term, cost)."""
        return self.candidate([extract_one(state) for state in self.states], strategy)

    def enumerate_candidates(self, max_candidates: int) -> list[CandidateGraph]:
        """As :func:`extract.extraction.enumerate_candidates`, layer by distinct layer."""
        if max_candidates < 1:
            raise ValueError("max_candidates must be at least 1")
        with _room(self.states[0]):
            candidates = [self.candidate([s.root for s in self.states], "original")]
            seen = {candidates[0].term_hash}
            for name, allowed in STRATEGIES.items():
                if len(candidates) >= max_candidates:
                    break
                choices = [_extract(s, LatencyCostModel(s, None, allowed)) for s in self.states]
                text = _text(self.split, [term for term, _ in choices])
                digest = hashlib.sha256(text.encode()).hexdigest()
                if digest in seen:
                    continue
                seen.add(digest)
                try:
                    candidates.append(self.candidate(choices, name))
                except LoweringError as exc:  # never expected; keep the other candidates
                    _LOG.warning("skipping candidate %r: %s", name, str(exc).splitlines()[0])
            return candidates

    def extract_best(self, node_cost: NodeCost | None = None) -> CandidateGraph:
        """As :func:`extract.extraction.extract_best`, layer by distinct layer."""
        with _room(self.states[0]):
            return self.extract(lambda s: _extract(s, LatencyCostModel(s, node_cost)), "best")


def _text(split: LayerSplit, terms: Sequence[Tensor]) -> str:
    """A candidate's ``term_text``: each distinct layer's term after the layers it computes."""
    return "\n".join(
        f"layers {','.join(map(str, g.members))}: {term}"
        for g, term in zip(split.groups, terms, strict=True)
    )

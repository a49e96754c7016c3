"""The tuner's door to the e-graph: translate, saturate, enumerate, extract.

A program of identical layers (:func:`extract.layers.split_layers`) is explored once per
distinct layer (:mod:`extract.dedup`); the report's ``layers`` and ``distinct_layers``
say so.  Any other program is one term in one e-graph.

>>> exploration = explore(mod)                      # doctest: +SKIP
>>> exploration.report.stop_reason                  # doctest: +SKIP
'saturated'
>>> for c in exploration.candidates:                # doctest: +SKIP
...     check_equivalent(mod, c.mod, inputs)        # the caller checks each one
>>> best = exploration.extract_best(node_cost)      # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm

from .dedup import LayeredProgram
from .extraction import CandidateGraph, NodeCost, enumerate_candidates, extract_best
from .layers import split_layers
from .saturate import ProgramEGraph, SaturationLimits, SaturationReport, saturate

__all__ = ["Exploration", "explore"]


@dataclass
class Exploration:
    """A saturated e-graph of one program and the candidates found in it.

    Attributes
    ----------
    state : ProgramEGraph
        The e-graph (kept so later extractions need no new saturation); for a program of
        deduplicated layers, the first distinct layer's.
    report : SaturationReport
        Why and when saturation stopped, rules fired, layers deduplicated.
    candidates : list of CandidateGraph
        Distinct programs, the original first.  Not checked numerically: the caller
        runs :func:`extract.equivalence.check_equivalent` on each before using it.
    layered : LayeredProgram or None
        The distinct layers' e-graphs when the program was split into layers.
    """

    state: ProgramEGraph
    report: SaturationReport
    candidates: list[CandidateGraph]
    layered: LayeredProgram | None = None

    def extract_best(
        self, node_cost: NodeCost | None = None, exact: bool = False, time_limit_s: float = 10.0
    ) -> CandidateGraph:
        """The cheapest program under ``node_cost`` (DAG cost).

        Greedy by default (:func:`extract.extraction.extract_best`); ``exact=True``
        solves the integer linear program of :func:`extract.exact.extract_exact` within
        ``time_limit_s`` seconds (strategy ``"exact"``; per distinct layer when the
        program was split into layers).
        """
        if exact:
            from .exact import extract_exact

            if self.layered is None:
                return extract_exact(self.state, node_cost, time_limit_s).candidate

            def one(state: ProgramEGraph) -> tuple:
                found = extract_exact(state, node_cost, time_limit_s).candidate
                return found.term, found.cost

            return self.layered.extract(one, "exact")
        if self.layered is not None:
            return self.layered.extract_best(node_cost)
        return extract_best(self.state, node_cost)


DEFAULT_LIMITS = SaturationLimits()


def explore(
    mod: tvm.IRModule, limits: SaturationLimits = DEFAULT_LIMITS, max_candidates: int = 4
) -> Exploration:
    """Translate ``mod["main"]`` to an e-graph, saturate it and enumerate candidates.

    Parameters
    ----------
    mod : tvm.IRModule
        Relax module with ``main`` (weights as parameters after ``num_input``).
    limits : SaturationLimits
        Iteration, e-node and time limits.
    max_candidates : int
        Candidates to return at most, the original included.

    Returns
    -------
    Exploration

    Raises
    ------
    extract.translate.UnsupportedProgram
        ``main`` uses constructs outside dataflow graphs.
    """
    split = split_layers(mod)
    if split is None:
        state = ProgramEGraph.from_module(mod)
        report = saturate(state, limits)
        return Exploration(state, report, enumerate_candidates(state, max_candidates))
    layered = LayeredProgram.from_split(split)
    report = layered.saturate(limits)
    candidates = layered.enumerate_candidates(max_candidates)
    return Exploration(layered.states[0], report, candidates, layered)

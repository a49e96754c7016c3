"""Bounded equality saturation of a translated program.

One iteration runs the ``shapes`` analysis to a fixpoint, then each rewrite ruleset once
(:data:`extract.rules.FAMILIES` order).  The loop stops when an iteration changes
nothing (``"saturated"``) or at the first limit reached, checked between iterations:
``max_iterations``, ``max_enodes`` (e-nodes of the term language) and ``max_seconds``
of wall-clock time.  An iteration is never interrupted, so the e-node count and the time
can end somewhat above their limits; the report gives the real values.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

import tvm
from egglog import EGraph, run

from .lang import Tensor
from .ops import NODE_NAMES
from .registration import register
from .rules import ANALYSIS, FAMILIES, RULESETS
from .translate import Translation, translate

__all__ = [
    "ProgramEGraph",
    "SaturationLimits",
    "SaturationReport",
    "StopReason",
    "recursion_room",
    "saturate",
]


@contextmanager
def recursion_room(nodes: int) -> Iterator[None]:
    """Let Python recurse deep enough for terms of about ``nodes`` nodes inside the block.

    egglog converts terms between Python and the e-graph recursively, a few frames per
    level of the term, and a program of many decoder layers is a deep term.  The limit
    is raised (never lowered) for the block and restored after it.
    """
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 10 * nodes + 10_000))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


StopReason = Literal["saturated", "iteration_limit", "node_limit", "time_limit"]


@dataclass(frozen=True)
class SaturationLimits:
    """Limits that make saturation end.

    Attributes
    ----------
    max_iterations : int
        Iterations at most (each: analysis to fixpoint, then every ruleset once).
    max_enodes : int
        Stop once the e-graph holds more e-nodes than this.
    max_seconds : float
        Stop once this much wall-clock time has passed, in seconds.
    families : tuple of str or None
        Rewrite rulesets to run (names from :data:`extract.rules.FAMILIES`); None runs all.
    """

    max_iterations: int = 32
    max_enodes: int = 50_000
    max_seconds: float = 30.0
    families: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.max_iterations < 0 or self.max_enodes < 0 or self.max_seconds < 0:
            raise ValueError("saturation limits must be non-negative")
        unknown = set(self.families or ()) - set(FAMILIES)
        if unknown:
            raise ValueError(f"unknown rewrite families: {', '.join(sorted(unknown))}")


@dataclass(frozen=True)
class SaturationReport:
    """What a saturation run did and why it stopped.

    Attributes
    ----------
    iterations : int
        Iterations completed.
    enodes : int
        E-nodes of the term language at the end.
    eclasses : int
        E-classes of the term language at the end.
    time_s : float
        Wall-clock seconds spent.
    stop_reason : {"saturated", "iteration_limit", "node_limit", "time_limit"}
        Why the loop ended.
    rules_fired : Mapping of str to int
        Matches per rewrite ruleset summed over all iterations (egglog's run reports);
        every ruleset that ran has an entry, zero when it never matched.
    layers : int
        Layers the program was split into (:mod:`extract.layers`); 0 when it was
        saturated as one term.
    distinct_layers : int
        Layers saturated (and extracted): identical layers share one e-graph, so
        ``layers - distinct_layers`` layers were deduplicated.  0 when not split.
    """

    iterations: int
    enodes: int
    eclasses: int
    time_s: float
    stop_reason: StopReason
    rules_fired: Mapping[str, int] = field(default_factory=dict)
    layers: int = 0
    distinct_layers: int = 0

    @property
    def deduplicated_layers(self) -> int:
        """Layers that reused an identical layer's e-graph and extracted choice."""
        return self.layers - self.distinct_layers


@dataclass
class ProgramEGraph:
    """An egglog e-graph holding one translated Relax program.

    Attributes
    ----------
    translation : Translation
        The program's term, side tables and facts.
    egraph : egglog.EGraph
        The e-graph; saturation adds to it.
    report : SaturationReport or None
        The report of the last :func:`saturate`, None before.
    """

    translation: Translation = field(repr=False)
    egraph: EGraph = field(repr=False)
    report: SaturationReport | None = None

    @classmethod
    def from_module(cls, mod: tvm.IRModule) -> ProgramEGraph:
        """Translate ``mod["main"]`` into an e-graph (see :func:`~extract.translate.translate`).

        Raises
        ------
        extract.translate.UnsupportedProgram
            ``main`` uses constructs outside dataflow graphs.
        extract.registration.RegistrationError
            egglog did not build the program's e-graph (see :mod:`extract.registration`).
        """
        translation = translate(mod)
        with recursion_room(len(translation.facts)):
            egraph = register(translation)
        return cls(translation, egraph)

    @property
    def root(self) -> Tensor:
        """The term of the program's output."""
        return self.translation.root

    def enodes(self) -> int:
        """E-nodes of the term language in the e-graph."""
        return sum(size for fn, size in self.egraph.all_function_sizes() if str(fn) in NODE_NAMES)

    def eclasses(self) -> int:
        """E-classes of the term language in the e-graph."""
        return len(self.egraph.freeze().decl.e_classes)


def saturate(state: ProgramEGraph, limits: SaturationLimits | None = None) -> SaturationReport:
    """Run the rulesets on ``state`` until saturated or a limit is reached.

    Parameters
    ----------
    state : ProgramEGraph
        Changed in place; ``state.report`` is set to the result.
    limits : SaturationLimits, optional
        Defaults to ``SaturationLimits()``.

    Returns
    -------
    SaturationReport
    """
    limits = limits or SaturationLimits()
    egraph = state.egraph
    families = limits.families if limits.families is not None else FAMILIES
    fired = dict.fromkeys(families, 0)
    start = time.perf_counter()
    iterations = 0
    reason: StopReason
    while True:
        if state.enodes() > limits.max_enodes:
            reason = "node_limit"
            break
        if time.perf_counter() - start > limits.max_seconds:
            reason = "time_limit"
            break
        if iterations >= limits.max_iterations:
            reason = "iteration_limit"
            break
        changed = egraph.run(ANALYSIS.saturate()).updated
        for name in families:
            report = egraph.run(run(RULESETS[name]))
            fired[name] += sum(report.num_matches_per_rule.values())
            changed = changed or report.updated
        iterations += 1
        if not changed:
            reason = "saturated"
            break
    # Leave shapes complete for extraction, whatever stopped the loop.
    egraph.run(ANALYSIS.saturate())
    state.report = SaturationReport(
        iterations=iterations,
        enodes=state.enodes(),
        eclasses=state.eclasses(),
        time_s=time.perf_counter() - start,
        stop_reason=reason,
        rules_fired=fired,
    )
    return state.report

"""Exact extraction: the cheapest program under DAG cost, as an integer linear program.

Greedy extraction (:func:`extract.extraction.extract_best`) picks, e-class by e-class,
the e-node whose own term is cheapest; with shared subterms that can miss the
cheapest program (DAG cost is not decomposable).  This module solves the problem
exactly, the formulation of egg's ILP extractor and of TENSAT (Yang et al., MLSys 2021):

- a binary ``x_n`` per tensor e-node (chosen) and ``y_c`` per e-class (needed);
  ``y_root = 1``; ``sum of x_n over the e-nodes of c = y_c``;
- ``x_n <= y_c'`` for every child e-class ``c'`` of ``n``;
- acyclicity: a level ``t_c`` in ``[0, C]`` per e-class with
  ``t_c - t_c' >= 1 - (C + 1)(1 - x_n)`` for ``n`` in ``c`` and each child ``c'``;
- the parts of one merged GEMM (``merged_dense`` and kin) share a binary ``z_g`` with
  ``x_n <= z_g``: the whole GEMM is paid once, by ``z_g``, whether one part is used or
  all of them (the lowering computes the whole GEMM either way);
- minimise ``sum cost_n x_n + sum cost_g z_g``: every chosen e-node is paid once (DAG cost).

The solver is HiGHS through :func:`scipy.optimize.milp`, with a time limit; when it
stops at the limit with a feasible program, that program is used (and said to be not
proven optimal).  The solution is read back through egglog's extractor with the chosen
e-nodes pinned, so the term and its lowering are those of the greedy path.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

from .extraction import (
    EPSILON_S,
    CandidateGraph,
    LatencyCostModel,
    NodeCost,
    _extract,
    _room,
    candidate_from_term,
)
from .lang import e_class_facts
from .saturate import ProgramEGraph

__all__ = ["ExactResult", "ExtractionError", "extract_exact"]

_LOG = logging.getLogger(__name__)
_SCALE = 1e6  # the ILP's costs are in microseconds


class ExtractionError(RuntimeError):
    """The ILP found no program (infeasible, or no solution within the time limit)."""


@dataclass(frozen=True)
class ExactResult:
    """An exactly extracted program.

    Attributes
    ----------
    candidate : CandidateGraph
        The program (``strategy="exact"``; ``cost`` its DAG cost in seconds).
    optimal : bool
        True when the solver proved optimality; False when it stopped at the time limit
        with a feasible program.
    objective_s : float
        The ILP's objective: the sum of the chosen e-nodes' costs, in seconds.
    solve_s : float
        Wall-clock seconds of the solver.
    """

    candidate: CandidateGraph
    optimal: bool
    objective_s: float
    solve_s: float


def extract_exact(
    state: ProgramEGraph, node_cost: NodeCost | None = None, time_limit_s: float = 10.0
) -> ExactResult:
    """The cheapest program of a saturated e-graph under DAG cost (ILP, see module doc).

    Parameters
    ----------
    state : ProgramEGraph
        A saturated e-graph.
    node_cost : NodeCost, optional
        Latency of an e-node in seconds, None for the default; see
        :data:`extract.extraction.NodeCost`.
    time_limit_s : float
        Wall-clock limit of the solver in seconds.

    Returns
    -------
    ExactResult

    Raises
    ------
    ExtractionError
        No feasible program was found within the time limit.

    Notes
    -----
    Optimal to within HiGHS' tolerances on costs in microseconds: programs whose costs
    differ by less than about a nanosecond (the :data:`~extract.extraction.EPSILON_S`
    tie-breakers) are not told apart.
    """
    model = LatencyCostModel(state, node_cost)
    nodes = model.nodes()
    classes = sorted({c for c, *_ in nodes} | {k for _, _, kids, _ in nodes for k in kids}, key=str)
    index = {c: i for i, c in enumerate(classes)}
    root = _root_class(state)
    n_nodes, n_classes = len(nodes), len(classes)
    # A part of a merged GEMM costs the whole GEMM once, however many of its parts are used.
    groups: dict[tuple, tuple[int, float]] = {}
    part_of: dict[int, int] = {}
    for n, (_, decl, _, _) in enumerate(nodes):
        found = model.merged_group(decl)
        if found is not None:
            key, whole = found
            part_of[n] = groups.setdefault(key, (len(groups), whole))[0]
    # variables: x (nodes), y (classes), t (levels), z (merged GEMMs)
    nx, ny, nz = n_nodes, n_classes, len(groups)
    size = nx + 2 * ny + nz
    rows, cols, vals, lower, upper = [], [], [], [], []
    row = 0

    def add(entries: list[tuple[int, float]], lo: float, hi: float) -> None:
        nonlocal row
        for col, val in entries:
            rows.append(row)
            cols.append(col)
            vals.append(val)
        lower.append(lo)
        upper.append(hi)
        row += 1

    members: dict[int, list[int]] = {i: [] for i in range(n_classes)}
    for n, (cls, _, _, _) in enumerate(nodes):
        members[index[cls]].append(n)
    for c, ns in members.items():  # sum x_n - y_c = 0
        add([(n, 1.0) for n in ns] + [(nx + c, -1.0)], 0.0, 0.0)
    big = float(n_classes + 1)
    for n, (cls, _, kids, _) in enumerate(nodes):
        c = index[cls]
        for kid in set(kids):
            k = index[kid]
            add([(n, 1.0), (nx + k, -1.0)], -np.inf, 0.0)  # x_n <= y_k
            # t_c - t_k - big * x_n >= 1 - big
            add([(nx + ny + c, 1.0), (nx + ny + k, -1.0), (n, -big)], 1.0 - big, np.inf)
    for n, g in part_of.items():  # x_n <= z_g
        add([(n, 1.0), (nx + 2 * ny + g, -1.0)], -np.inf, 0.0)
    constraints = LinearConstraint(
        coo_array((vals, (rows, cols)), shape=(row, size)).tocsr(), lower, upper
    )
    cost = np.zeros(size)
    cost[:nx] = [EPSILON_S * _SCALE if n in part_of else c * _SCALE  # microseconds: well above
                 for n, (*_, c) in enumerate(nodes)]                     # HiGHS' tolerances
    for g, whole in groups.values():
        cost[nx + 2 * ny + g] = whole * _SCALE
    lo, hi = np.zeros(size), np.ones(size)
    hi[nx + ny : nx + 2 * ny] = n_classes
    lo[nx + index[root]] = 1.0
    integrality = np.zeros(size)
    integrality[: nx + ny] = 1
    integrality[nx + 2 * ny :] = 1
    start = time.perf_counter()
    result = milp(
        cost,
        constraints=constraints,
        integrality=integrality,
        bounds=Bounds(lo, hi),
        options={"time_limit": float(time_limit_s), "disp": False, "mip_rel_gap": 1e-9},
    )
    solve_s = time.perf_counter() - start
    if result.x is None:
        raise ExtractionError(f"exact extraction found no program: {result.message}")
    chosen = frozenset(nodes[n][1] for n in range(nx) if result.x[n] > 0.5)
    with _room(state):
        pinned = LatencyCostModel(state, node_cost, pinned=chosen)
        pinned._by_signature = model._by_signature  # priced already
        term, dag = _extract(state, pinned)  # the read-back term's DAG cost, to match the objective
        candidate = candidate_from_term(state, term, "exact", dag)
    optimal = result.status == 0
    if not optimal:
        _LOG.info("exact extraction stopped at its time limit: %s", result.message)
    return ExactResult(candidate, optimal, float(result.fun) / _SCALE, solve_s)


def _root_class(state: ProgramEGraph) -> object:
    """The e-class of the program's output (marked by :func:`extract.lang.program_root`)."""
    for name, value in e_class_facts(state.egraph.freeze().decl):
        if name == "program_root":
            return value
    raise ExtractionError("the e-graph has no program root")

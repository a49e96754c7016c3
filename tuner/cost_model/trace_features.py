"""Features of a candidate's schedule trace: the decisions behind a schedule, not only their effect.

TVM's per-store features describe the loops a schedule produced; the trace
(``Trace.as_json``: instructions and sampling decisions) says how it was made.
For MetaSchedule's CPU multi-level tiling (``SSRSRS``) a spatial loop is split
into 4 tiles and a reduction loop into 2 (``SamplePerfectTile``), and
``SampleCategorical`` picks the unroll step. Untuned defaults and hand-written
seed templates have no decisions; their features are the instruction counts.

They raise held-out top-1 a little and pairwise accuracy within noise (see
docs/decisions.md, "Cost model features: the workload's shapes and the trace's
decisions").
"""

from __future__ import annotations

import json

import numpy as np

#: SamplePerfectTile decision lengths kept, spatial (4 tiles) then reduction (2)
TILE_LEVELS = (4, 2)
#: instructions counted (log2 of 1 + count), in feature order
INSTRUCTIONS = ("Split", "Fuse", "Parallel", "Vectorize", "ComputeAt", "ReverseComputeAt", "RFactor",
                "CacheWrite", "Unroll", "DecomposeReduction", "ComputeInline", "Reorder")
NAMES = (*(f"log2 tile {n}-way level {i}" for n in TILE_LEVELS for i in range(n)),
         "unroll choice", "decisions", "instructions",
         *(f"log2 1+{name}" for name in INSTRUCTIONS),
         "outermost compute location", "innermost compute location")
N_TRACE_FEATURES = len(NAMES)
_NONE = -3.0  # a decision the trace does not make (compute locations are -2 inline, -1 root, 0... a loop)


def trace_features(trace_json: str) -> np.ndarray:
    """float64 [N_TRACE_FEATURES] features of a trace in our canonical JSON (``[instructions, decisions]``).

    For each tile arity in ``TILE_LEVELS``, the sum over the loops split that way
    of log2 of each level's factor (level 0 outermost); the largest
    ``SampleCategorical`` decision (the unroll step's index, -3 when none); the
    number of decisions and of instructions; log2(1 + count) of each of
    ``INSTRUCTIONS``; the largest and least ``SampleComputeLocation`` decision
    (-3 when none).

    Raises
    ------
    ValueError
        ``trace_json`` is not a trace's JSON.
    """
    try:
        insts, decisions = json.loads(trace_json)
        names = [inst[0] for inst in insts]
    except (TypeError, ValueError, IndexError, KeyError) as err:
        raise ValueError(f"not a trace's JSON: {err}") from None
    tiles = {n: np.zeros(n) for n in TILE_LEVELS}
    categorical, locations = [], []
    for index, value in decisions:
        name = names[index]
        if name == "SamplePerfectTile" and len(value) in tiles:
            tiles[len(value)] += np.log2(np.maximum(np.asarray(value, np.float64), 1.0))
        elif name == "SampleCategorical":
            categorical.append(value)
        elif name == "SampleComputeLocation":
            locations.append(value)
    counts = np.log2(1.0 + np.array([names.count(name) for name in INSTRUCTIONS], np.float64))
    return np.concatenate([*(tiles[n] for n in TILE_LEVELS),
                           [max(categorical, default=_NONE), len(decisions), len(insts)], counts,
                           [max(locations, default=_NONE), min(locations, default=_NONE)]])

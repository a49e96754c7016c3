"""Model import, e-graph rewriting and extraction, lowering to kernels."""

from .egraph import Exploration, explore
from .equivalence import CandidateMismatch, check_equivalent
from .extraction import CandidateGraph, NodeCost, enumerate_candidates, extract_best
from .frontend import (
    ImportedModel,
    ModelImportError,
    ModelSource,
    check_model,
    import_model,
    known_models,
    load_model,
)
from .saturate import ProgramEGraph, SaturationLimits, SaturationReport, saturate

__all__ = [
    "CandidateGraph",
    "CandidateMismatch",
    "Exploration",
    "NodeCost",
    "ProgramEGraph",
    "SaturationLimits",
    "SaturationReport",
    "check_equivalent",
    "enumerate_candidates",
    "explore",
    "extract_best",
    "saturate",
    "ImportedModel",
    "ModelImportError",
    "ModelSource",
    "check_model",
    "import_model",
    "known_models",
    "load_model",
]

"""Model import, e-graph rewriting and extraction, lowering to kernels."""

from .frontend import ImportedModel, ModelImportError, known_models, load_model

__all__ = [
    "ImportedModel",
    "ModelImportError",
    "known_models",
    "load_model",
]

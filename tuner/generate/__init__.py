"""The deployable model: an artifact directory of compiled programs, its manifest and weights,
and the runtime that loads it and generates (TVM's runtime and numpy only).

``load(path)`` returns a :class:`GeneratingModel`; ``model.generate(input_ids,
max_new_tokens=64)`` decodes greedily, or samples with a seed. :mod:`tuner.generate.build`
writes an artifact (it needs torch and transformers; loading does not).
"""

from .artifact import load
from .manifest import ArtifactError
from .runtime import GeneratingModel, Generation

__all__ = ["ArtifactError", "Generation", "GeneratingModel", "load"]

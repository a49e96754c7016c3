"""Building candidates in a pool of separate processes (crash and timeout isolation).

A thin layer over MetaSchedule's ``LocalBuilder``: its processes stay up for the
whole session, so each batch pays only for compilation.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm

from .tvmapi import ms


@dataclass(frozen=True)
class BuildResult:
    """Where a built candidate lies, or why it did not build."""

    artifact_path: str | None
    error: str | None


class Builder:
    """Builds scheduled kernels for a target in ``workers`` processes.

    Parameters
    ----------
    target : tvm.target.Target
        What to compile for.
    workers : int
        Build processes (default: the CPU count).
    timeout_s : float
        Seconds one build may take before it is killed and reported.
    """

    def __init__(self, target: tvm.target.Target, workers: int | None = None, timeout_s: float = 60.0) -> None:
        self.target = target
        self._builder = ms.builder.LocalBuilder(max_workers=workers, timeout_sec=timeout_s)

    def build(self, mods: list[tvm.IRModule]) -> list[BuildResult]:
        """Build each module (a scheduled kernel as ``main``); one result per module, in order."""
        if not mods:
            return []
        inputs = [ms.builder.BuilderInput(mod, self.target) for mod in mods]
        return [BuildResult(r.artifact_path, r.error_msg) for r in self._builder.build(inputs)]

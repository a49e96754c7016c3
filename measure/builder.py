"""Building candidates in a pool of separate processes (crash and timeout isolation).

The pool (TVM's ``PopenPoolExecutor``) stays up across batches, so a batch pays
only for compilation; it is recycled every ``recycle_after`` builds because TVM's
pool workers leak memory over long use. Each build uses MetaSchedule's default
build and export functions and reports its own compile time. Each pool process
imports the builder and compiles a tiny kernel before its first candidate
(untimed), so the first candidate's timeout is not spent on start-up.
"""

from __future__ import annotations

import functools
import os
import shutil
import time
from dataclasses import dataclass

import tvm
from tvm.support.popen_pool import PopenPoolExecutor, StatusKind

from .lifetime import bind_tvm_pools, die_on_sigint


@dataclass(frozen=True)
class BuildResult:
    """Where a built candidate lies (a tar of the kernel library), or why it did not build."""

    artifact_path: str | None
    error: str | None
    build_time_s: float = 0.0


def _build_one(mod: tvm.IRModule, *, target: tvm.target.Target) -> tuple[str, float]:
    from .tvmapi import build_and_export, register_tensor_intrinsics

    register_tensor_intrinsics(target)  # before the build imports every backend's intrinsics
    start = time.perf_counter()
    path = build_and_export(mod, target)
    return path, time.perf_counter() - start


def _start_process(target: tvm.target.Target, warm_up: bool) -> None:
    """Set a pool process up (TVM's ``PopenWorker`` initializer): SIGINT ends it quietly; warm it up if asked."""
    die_on_sigint()
    if warm_up:
        _warm_up(target)


def _warm_up(target: tvm.target.Target) -> None:
    """Import the builder's modules and compile a tiny kernel, so a candidate's timeout counts only its own build.

    Runs once per pool process, untimed (from TVM's ``PopenWorker`` initializer).
    """
    from tvm import te

    a = te.placeholder((4,), "float32", name="A")
    c = te.compute((4,), lambda i: a[i] + 1.0, name="C")
    path, _ = _build_one(tvm.IRModule({"main": te.create_prim_func([a, c]).with_attr("global_symbol", "main")}),
                         target=target)
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)


class Builder:
    """Builds scheduled kernels for a target in ``workers`` processes.

    Parameters
    ----------
    target : tvm.target.Target
        What to compile for.
    workers : int
        Build processes (default: the CPU count).
    timeout_s : float
        Seconds one build may take before its process is killed (status ``timeout``).
    recycle_after : int
        Builds after which the pool's processes are replaced.
    warm_up : bool
        Warm each pool process up (untimed) before its first candidate.
    """

    def __init__(
        self, target: tvm.target.Target, workers: int | None = None, timeout_s: float = 60.0, recycle_after: int = 256,
        warm_up: bool = True,
    ) -> None:
        self.target = target
        self.workers = workers or os.cpu_count() or 1
        self.timeout_s = timeout_s
        self.recycle_after = recycle_after
        self.warm_up = warm_up
        self._pool: PopenPoolExecutor | None = None
        self._built = 0

    def build(self, mods: list[tvm.IRModule]) -> list[BuildResult]:
        """Build each module (a scheduled kernel as ``main``); one result per module, in order."""
        if not mods:
            return []
        pool = self._ready_pool()
        self._built += len(mods)
        results = []
        for item in pool.map_with_error_catching(functools.partial(_build_one, target=self.target), mods):
            if item.status == StatusKind.COMPLETE:
                results.append(BuildResult(item.value[0], None, item.value[1]))
            elif item.status == StatusKind.TIMEOUT:
                results.append(BuildResult(None, f"build timeout: killed after {self.timeout_s:g} s", self.timeout_s))
            else:
                results.append(BuildResult(None, f"build error: {item.value}"))
        return results

    def _ready_pool(self) -> PopenPoolExecutor:
        """The pool of build processes, started (again, once ``recycle_after`` builds are done) if need be."""
        if self._pool is None or self._built >= self.recycle_after:
            self.close()
            bind_tvm_pools()  # the build processes end with this process
            self._pool = PopenPoolExecutor(max_workers=self.workers, timeout=self.timeout_s,
                                           initializer=_start_process, initargs=(self.target, self.warm_up))
            self._built = 0
        return self._pool

    def close(self) -> None:
        """Stop the build processes."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            try:
                pool.shutdown()
            except Exception:  # noqa: BLE001 - workers already gone (e.g. after Ctrl-C): nothing to stop
                pass

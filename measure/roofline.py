"""This machine's roofline: peak FLOP/s and memory bandwidth, both measured.

Method
------
- **Peak FLOP/s** (float32): an FMA microbenchmark built with TVM for the host
  CPU (``llvm -mcpu=<host>``), one parallel chunk per core. Each chunk keeps
  ``chains`` x ``lanes`` float32 accumulators in registers (a local buffer,
  unrolled and vectorised, so LLVM emits independent vector FMAs that hide the
  FMA latency) and updates them ``x = x * a + b`` ``_FMA_STEPS`` times; each
  update counts 2 FLOPs. The shapes in ``_FMA_SHAPES`` (one 256-bit or one
  512-bit register per chain, 8 or 12 chains) are all measured and the best
  kept: a shape whose accumulators do not fit the register file spills to the
  stack and reads low, and which shapes fit depends on the vector ISA. This is
  the method of the Empirical Roofline Toolkit (Lo et al., "Roofline Model
  Toolkit", PMBS 2014): a sweep of compute kernels of independent FMAs that fit
  in registers, the peak being the best of them.
- **Bandwidth** (bytes/s): a STREAM "copy" kernel (McCalpin, STREAM benchmark,
  https://www.cs.virginia.edu/stream/) ``b[i] = a[i]`` built with TVM, parallel
  over all cores and vectorised, over float32 arrays of at least 4x the last-level
  cache and at least 64 MiB each (STREAM's sizing rule). Like STREAM it counts 2
  x 4 bytes per element (one read, one write; write-allocate traffic not counted).

Both figures are the best (shortest time) of ``repeat`` timed repeats with TVM's
``time_evaluator``, as a peak is the best the machine reaches; on a loaded
machine they read low. Measured in this process on the host, not on an RPC worker.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import numpy as np

# (chains, lanes): independent accumulator rows per core, float32 lanes per row
# (8: one 256-bit register, 16: one 512-bit register or two 256-bit ones).
_FMA_SHAPES = ((8, 8), (12, 8), (8, 16), (12, 16))
_FMA_STEPS = 8192  # FMA steps per accumulator per call
_MIN_STREAM_BYTES = 64 << 20
_STREAM_VECTOR = 16


@dataclass(frozen=True)
class Roofline:
    """Measured peaks of one machine.

    Attributes
    ----------
    peak_flops_per_s : float
        Float32 FLOP/s from the FMA microbenchmark (a fused multiply-add counts 2).
    bandwidth_bytes_per_s : float
        Main-memory bytes/s from the STREAM copy kernel (read + write bytes).
    cores : int
        Threads the kernels ran on.
    """

    peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    cores: int

    @property
    def ridge_intensity(self) -> float:
        """Arithmetic intensity (FLOPs/byte) where the roofline turns flat."""
        return self.peak_flops_per_s / self.bandwidth_bytes_per_s

    def attainable_flops_per_s(self, intensity: np.ndarray | float) -> np.ndarray | float:
        """The roofline: ``min(peak, bandwidth * intensity)`` for intensities in FLOPs/byte."""
        return np.minimum(self.peak_flops_per_s, self.bandwidth_bytes_per_s * np.asarray(intensity))


def _host_target(cores: int):
    from .tvmapi import host_cpu, make_target

    return make_target({"kind": "llvm", "mcpu": host_cpu(), "num-cores": cores})


def _build(func, target):
    import tvm

    return tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target=target).jit()


def _fma_kernel(cores: int, chains: int, lanes: int):
    from .tvmapi import T

    steps = _FMA_STEPS

    @T.prim_func(private=True)
    def fma(a: T.Buffer((cores, chains, lanes), "float32")):
        for p in T.parallel(cores):
            acc = T.decl_buffer((chains, lanes), "float32", scope="local")
            for u in T.unroll(chains):
                for v in T.vectorized(lanes):
                    acc[u, v] = a[p, u, v]
            for _ in range(steps):
                for u in T.unroll(chains):
                    for v in T.vectorized(lanes):
                        acc[u, v] = acc[u, v] * T.float32(0.999) + T.float32(0.001)
            for u in T.unroll(chains):
                for v in T.vectorized(lanes):
                    a[p, u, v] = acc[u, v]

    return fma


def _copy_kernel(n: int, cores: int):
    from .tvmapi import T

    vec = _STREAM_VECTOR
    per_core = n // cores // vec

    @T.prim_func(private=True)
    def copy(a: T.Buffer((cores, per_core, vec), "float32"), b: T.Buffer((cores, per_core, vec), "float32")):
        for p in T.parallel(cores):
            for i in range(per_core):
                for v in T.vectorized(vec):
                    b[p, i, v] = a[p, i, v]

    return copy


def llc_bytes() -> int:
    """The largest cache size the OS reports (bytes, ``sysconf`` level 3 then 2), or 32 MiB when it reports none."""
    sizes = []
    for name in ("LEVEL3_CACHE_SIZE", "LEVEL2_CACHE_SIZE"):
        try:
            sizes.append(int(os.sysconf(f"SC_{name}")))
        except (ValueError, OSError):
            pass
    return max([s for s in sizes if s > 0] or [32 << 20])


def measure_peak_flops(cores: int | None = None, repeat: int = 5) -> float:
    """Float32 peak FLOP/s of this machine: the best FMA microbenchmark of ``_FMA_SHAPES`` (module docstring)."""
    import tvm

    cores = cores or os.cpu_count() or 1
    target, dev = _host_target(cores), tvm.cpu()
    best = 0.0
    for chains, lanes in _FMA_SHAPES:
        fn = _build(_fma_kernel(cores, chains, lanes), target)
        a = tvm.runtime.tensor(np.ones((cores, chains, lanes), "float32"), dev)
        times = fn.time_evaluator("main", dev, number=10, repeat=repeat)(a).results
        best = max(best, 2.0 * cores * chains * lanes * _FMA_STEPS / min(times))
    return best


def measure_bandwidth(cores: int | None = None, repeat: int = 5) -> float:
    """Main-memory bandwidth of this machine in bytes/s from the STREAM copy kernel (module docstring)."""
    import tvm

    cores = cores or os.cpu_count() or 1
    n_bytes = max(_MIN_STREAM_BYTES, 4 * llc_bytes())
    per_core = -(-n_bytes // 4 // cores // _STREAM_VECTOR)
    n = per_core * cores * _STREAM_VECTOR
    fn = _build(_copy_kernel(n, cores), _host_target(cores))
    dev = tvm.cpu()
    shape = (cores, per_core, _STREAM_VECTOR)
    a = tvm.runtime.tensor(np.ones(shape, "float32"), dev)
    b = tvm.runtime.tensor(np.zeros(shape, "float32"), dev)
    times = fn.time_evaluator("main", dev, number=1, repeat=repeat)(a, b).results
    return 2.0 * 4 * n / min(times)


@functools.cache
def measure_roofline(cores: int | None = None, repeat: int = 5) -> Roofline:
    """Measure this machine's roofline (cached per process; about 8 s, most of it compiling).

    Parameters
    ----------
    cores : int, optional
        Threads to run on; default ``os.cpu_count()``.
    repeat : int
        Timed repeats per kernel; the best is kept.

    Returns
    -------
    Roofline
        Peak float32 FLOP/s and main-memory bandwidth in bytes/s.
    """
    cores = cores or os.cpu_count() or 1
    return Roofline(
        peak_flops_per_s=measure_peak_flops(cores, repeat),
        bandwidth_bytes_per_s=measure_bandwidth(cores, repeat),
        cores=cores,
    )

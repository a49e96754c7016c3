"""What a user would pick instead of tuning: PyTorch eager, ``torch.compile`` and ONNX Runtime.

Each peer is built from the same PyTorch module (its ``forward(first, **rest)``
takes the float32 inputs by name, the first positional) and returns a call that
runs it once on those inputs and gives its outputs as numpy arrays:

- ``torch_eager``: the module itself under ``torch.no_grad()`` (transformers' SDPA attention);
- ``torch_compile``: ``torch.compile`` with Inductor's default mode;
- ``torch_compile_max_autotune``: ``torch.compile(mode="max-autotune-no-cudagraphs")`` with
  ``torch._inductor.config.freezing = True`` (weights folded in as constants) and
  ``max_autotune_gemm_backends = "CPP,ATEN"`` (Inductor's C++ GEMM template for CPUs
  beside ATen's);
- ``onnxruntime``: the module exported to ONNX (``torch.onnx.export(dynamo=True)``, the
  KV cache as explicit inputs and outputs), run by ONNX Runtime's CPU execution
  provider with every graph optimisation on (``ORT_ENABLE_ALL``).

Every peer runs on ``threads`` threads (``torch.set_num_threads``, ONNX Runtime's
``intra_op_num_threads``), the count :func:`measure.threads.physical_cores` gives ours.
Each is meant to run in a process of its own (:mod:`tuner.contender`): their thread
pools would spin against each other in one process.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import Callable

import numpy as np

from .options import PEERS

LABELS = {
    "torch_eager": "PyTorch eager",
    "torch_compile": "torch.compile (default)",
    "torch_compile_max_autotune": "torch.compile (max-autotune, freezing, C++ GEMM)",
    "onnxruntime": "ONNX Runtime (CPU EP, all optimisations)",
}

Call = Callable[[], tuple[np.ndarray, ...]]


def installed(name: str) -> bool:
    """Whether peer ``name`` can run here: ONNX Runtime is an optional dependency (``pip install tune[bench]``)."""
    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}; expected one of {', '.join(PEERS)}")
    return name != "onnxruntime" or importlib.util.find_spec("onnxruntime") is not None


def build_peer(name: str, module, arrays: dict[str, np.ndarray], threads: int) -> Call:
    """Peer ``name`` of ``module`` on ``arrays``; the returned call runs it once and returns its outputs.

    Compiling peers compile lazily, on their first call (``torch.compile``), or here
    (the ONNX export and the ONNX Runtime session): the caller times the first call
    with the build as the peer's compile time.

    Raises
    ------
    ValueError
        An unknown peer name.
    ImportError
        ONNX Runtime (or the exporter's ``onnxscript``) not installed.
    """
    import torch

    torch.set_num_threads(threads)
    first, *rest = arrays
    x = torch.from_numpy(np.ascontiguousarray(arrays[first]))
    kwargs = {k: torch.from_numpy(np.ascontiguousarray(arrays[k])) for k in rest}
    if name == "onnxruntime":
        return _onnxruntime(module, x, kwargs, arrays, threads)
    if name == "torch_eager":
        fn = module
    elif name == "torch_compile":
        fn = torch.compile(module)
    elif name == "torch_compile_max_autotune":
        from torch._inductor import config as inductor

        inductor.freezing = True
        inductor.max_autotune_gemm_backends = "CPP,ATEN"
        fn = torch.compile(module, mode="max-autotune-no-cudagraphs")
    else:
        raise ValueError(f"unknown peer {name!r}; expected one of {', '.join(PEERS)}")

    def call() -> tuple[np.ndarray, ...]:
        with torch.no_grad():
            return _numpy(fn(x, **kwargs))

    return call


def _numpy(out) -> tuple[np.ndarray, ...]:
    items = out if isinstance(out, tuple | list) else (out,)
    return tuple(t.detach().numpy() for t in items)


def _onnxruntime(module, x, kwargs: dict, arrays: dict[str, np.ndarray], threads: int) -> Call:
    import onnxruntime as ort
    import torch

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    with tempfile.TemporaryDirectory(prefix="tune-onnx-") as tmp:
        path = os.path.join(tmp, "peer.onnx")
        with torch.no_grad():
            torch.onnx.export(module, (x,), path, kwargs=kwargs, dynamo=True, input_names=list(arrays),
                              verbose=False)
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    feeds = {i.name: np.ascontiguousarray(arrays[i.name]) for i in session.get_inputs()}

    def call() -> tuple[np.ndarray, ...]:
        return tuple(session.run(None, feeds))

    return call


def layer_peer(name: str, model: str, stage: str, seq_len: int, kv_len: int, layers: int, seed: int,
               threads: int) -> Call:
    """Peer ``name`` of a config model's decoder layers (:func:`extract.frontend.torch_module`) on its inputs.

    The same weights and inputs as the imported model of those arguments; attention is
    transformers' SDPA, the implementation a user gets by default.
    """
    from extract.frontend import check_model, torch_module

    source = check_model(model, stage, seq_len, kv_len, layers)
    module, arrays = torch_module(source, stage=stage, seq_len=seq_len, kv_len=kv_len, layers=layers, seed=seed)
    module.config._attn_implementation = "sdpa"
    return build_peer(name, module, arrays, threads)

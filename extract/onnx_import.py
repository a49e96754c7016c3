"""ONNX files to Relax, with weights as function parameters and random example inputs."""

from __future__ import annotations

import contextlib
import functools
import io
import re
import warnings
from pathlib import Path

import numpy as np
import onnx
import tvm

from .imported import (
    ImportedModel,
    ModelImportError,
    message_line,
    operator_error,
    readonly,
    stable_hash,
)
from .onnx_fold import fold_shape_arithmetic

__all__ = ["load_onnx"]


def _example(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Random data: standard normal floats, integers in {0, 1} (safe indices), coin-flip bools."""
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 2, size=shape).astype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    raise ModelImportError(f"unsupported ONNX input dtype {dtype}")


def _failing_node(exc: BaseException, printed: str) -> str | None:
    """The ONNX node TVM's importer failed on, as ``OpType 'name'``, or None when unknown.

    The importer converts ``graph.node`` in order in ``_construct_nodes``; the innermost
    such frame of the traceback holds the node (a node of an ``If`` branch is innermost).
    Without that frame, the operator it printed ("Error converting operator X") names
    the op type only.
    """
    node, tb = None, exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "_construct_nodes":
            node = tb.tb_frame.f_locals.get("node", node)
        tb = tb.tb_next
    if isinstance(node, onnx.NodeProto):
        return f"{node.op_type} {node.name!r}" if node.name else node.op_type
    match = re.search(r"Error converting operator (\w+)", printed)
    return match.group(1) if match else None


def _node_error(exc: Exception, printed: str) -> ModelImportError:
    """The importer's failure as a ModelImportError naming the node it failed on, if known."""
    error = operator_error("TVM's ONNX importer", exc)
    node = _failing_node(exc, printed)
    if node is None or "does not support" in str(error):
        return error
    return ModelImportError(f"TVM's ONNX importer failed on node {node}: {message_line(exc)}")


def load_onnx(path: Path, *, seq_len: int, seed: int, label: str | None = None) -> ImportedModel:
    """Import an ONNX file; see :func:`extract.frontend.load_model`.

    Every dynamic (named or unknown) input dimension is set to ``seq_len``.  Weights
    (graph initializers) become parameters of ``main`` after the activations.  ``label``
    names the model in its ``source`` (default: the file's name).
    """
    from tvm.relax.frontend.onnx import from_onnx

    if not path.is_file():
        raise ModelImportError(f"ONNX file not found: {path}")
    try:
        model = onnx.load(str(path))
    except Exception as exc:
        raise ModelImportError(f"malformed ONNX file {path}: {message_line(exc)}") from exc
    checker_error = None
    try:
        onnx.checker.check_model(str(path))
    except Exception as exc:
        checker_error = message_line(exc)
    if not model.graph.output:
        raise ModelImportError(
            f"malformed ONNX file {path}: {checker_error or 'the graph has no outputs'}"
        )

    initializers = {init.name for init in model.graph.initializer}
    rng = np.random.default_rng(seed)
    shapes: dict[str, list[int]] = {}
    dtypes: dict[str, str] = {}
    arrays: list[np.ndarray] = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        if not value.type.HasField("tensor_type") or not tensor_type.HasField("shape"):
            raise ModelImportError(f"ONNX input {value.name!r} in {path} has no tensor shape")
        shape = [
            d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else seq_len
            for d in tensor_type.shape.dim
        ]
        try:
            dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
        except Exception as exc:
            raise ModelImportError(
                f"ONNX input {value.name!r} has an unsupported element type"
            ) from exc
        shapes[value.name], dtypes[value.name] = shape, str(dtype)
        arrays.append(readonly(_example(rng, tuple(shape), dtype)))

    fold_shape_arithmetic(model, shapes)
    printed = io.StringIO()  # the importer prints "Error converting operator ..." on a failure
    with warnings.catch_warnings(), contextlib.redirect_stdout(printed):
        warnings.simplefilter("ignore")  # the importer re-warns the checker's complaints
        try:
            mod = from_onnx(model, shape_dict=shapes, dtype_dict=dtypes, keep_params_in_input=True)
        except tvm.error.OpNotImplemented as exc:
            raise operator_error("TVM's ONNX importer", exc) from exc
        except Exception as exc:
            if checker_error is not None:
                raise ModelImportError(f"malformed ONNX file {path}: {checker_error}") from exc
            raise _node_error(exc, printed.getvalue()) from exc

    func = mod["main"]
    num_input = int(func.attrs["num_input"])
    params = tuple(
        readonly(t.numpy()) for t in (func.attrs["params"] if "params" in func.attrs else ())
    )
    if len(func.params) - num_input != len(params):
        raise ModelImportError(
            "internal: weight parameters of the Relax function do not match the file"
        )
    if "params" in func.attrs:
        # The weights live in ImportedModel.params; a copy in the module would double memory.
        mod["main"] = func.without_attr("params")
    input_names = tuple(p.name for p in func.params[:num_input])
    feeds = dict(zip(shapes, arrays))

    @functools.cache
    def reference() -> tuple[np.ndarray, ...] | None:
        from onnx.reference import ReferenceEvaluator

        try:  # the file as written, not the folded graph TVM imported
            outputs = ReferenceEvaluator(str(path)).run(None, feeds)
        except Exception:  # the reference evaluator lacks some operators
            return None
        return tuple(readonly(np.asarray(out)) for out in outputs)

    shape_text = ", ".join(f"{name}{shape}" for name, shape in shapes.items())
    return ImportedModel(
        mod=mod,
        input_names=input_names,
        inputs=tuple(arrays),
        params=params,
        source=f"{label or path.name} onnx {shape_text}",
        model_hash=stable_hash("onnx", path.read_bytes(), shapes, dtypes),
        flops=None,
        param_names=tuple(p.name for p in func.params[num_input:]),
        output_names=tuple(out.name for out in model.graph.output),
        _torch_call=None,
        _reference=reference,
    )

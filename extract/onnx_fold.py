"""Fold an ONNX graph's shape arithmetic into constants once its input shapes are fixed.

Exporters that keep the sequence length dynamic (``torch.onnx.export`` with
``dynamic_axes``) compute masks, position ids and reshape targets from ``Shape`` nodes
at run time.  TVM's ONNX importer handles some of these chains badly (a
``ConstantOfShape`` of a computed empty shape fails with a ``broadcast_to`` rank
error).  With every input dimension fixed, those chains are constants: each is
evaluated here with ONNX's reference implementation and replaced by a ``Constant``
node, so the importer sees only the tensor program.  Weights (floating-point
initializers) are never folded: they stay parameters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["fold_shape_arithmetic"]

# A folded value larger than this many elements is left to the importer (a constant
# that big is data, not shape arithmetic).
MAX_FOLDED_ELEMENTS = 1 << 16
# Folding passes at most (each runs shape inference again on what the last one folded).
MAX_PASSES = 8
# Operators that are never evaluated here: control flow and randomness.
_NOT_FOLDED = frozenset({"If", "Loop", "Scan", "RandomNormal", "RandomNormalLike", "RandomUniform",
                         "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout"})


def fold_shape_arithmetic(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]) -> int:
    """Fix ``model``'s input shapes to ``shapes`` and fold its constant nodes, in place.

    A node is folded when it is a ``Shape`` or ``Size`` of a tensor whose shape ONNX's
    shape inference knows, or when every input is a constant (a ``Constant`` node, an
    integer or boolean initializer, or a folded output) and its outputs have at most
    :data:`MAX_FOLDED_ELEMENTS` elements; it is replaced by one ``Constant`` node per
    output, under the same output names.  A node the reference implementation cannot
    evaluate is kept as it is.  Returns the number of nodes folded.  Never raises for
    a model that ``onnx.checker`` accepts: when shape inference fails, only nodes whose
    inputs are all constants are folded.
    """
    for value in model.graph.input:
        for dim, size in zip(value.type.tensor_type.shape.dim, shapes.get(value.name, ())):
            dim.Clear()
            dim.dim_value = int(size)
    folded = 0
    for _ in range(MAX_PASSES):  # a folded Slice or Reshape lets inference fix shapes further on
        found = _fold_pass(model)
        folded += found
        if not found:
            break
    return folded


def _fold_pass(model: onnx.ModelProto) -> int:
    """Fold every node that is constant given the shapes inference fixes now; how many."""
    static = _static_shapes(model)
    opset = {entry.domain: entry.version for entry in model.opset_import}
    known: dict[str, np.ndarray] = {
        init.name: numpy_helper.to_array(init)
        for init in model.graph.initializer
        if init.data_type not in _FLOAT_TYPES and np.prod(init.dims) <= MAX_FOLDED_ELEMENTS
    }
    nodes, folded = [], 0
    for node in model.graph.node:
        values = _fold(node, known, static, opset)
        if values is None or node.op_type == "Constant":
            if values is not None:
                known[node.output[0]] = values[0]
            nodes.append(_copy(node))
            continue
        folded += 1
        for name, value in zip(node.output, values):
            known[name] = value
            nodes.append(helper.make_node("Constant", [], [name], name=f"{node.name or name}_folded",
                                          value=numpy_helper.from_array(value)))
    if folded:
        del model.graph.node[:]
        model.graph.node.extend(nodes)
    return folded


_FLOAT_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                          onnx.TensorProto.BFLOAT16})


def _copy(node: onnx.NodeProto) -> onnx.NodeProto:
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    return copy


def _static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Every value's shape that shape inference fixes completely; empty when it fails.

    Inference runs on a copy without the weights' data (their shapes are enough), so a
    large model is not serialized.
    """
    graph = model.graph
    declared = {value.name for value in graph.input}
    weights = [helper.make_tensor_value_info(init.name, init.data_type, list(init.dims))
               for init in graph.initializer if init.data_type in _FLOAT_TYPES and init.name not in declared]
    skeleton = helper.make_model(
        helper.make_graph(graph.node, graph.name, [*graph.input, *weights], graph.output,
                          [init for init in graph.initializer if init.data_type not in _FLOAT_TYPES]),
        opset_imports=model.opset_import, functions=model.functions, ir_version=model.ir_version)
    try:
        inferred = onnx.shape_inference.infer_shapes(skeleton, data_prop=True)
    except Exception:  # noqa: BLE001 - folding is an optimisation; the importer reports problems
        return {}
    shapes = {}
    for value in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        tensor_type = value.type.tensor_type
        if not value.type.HasField("tensor_type") or not tensor_type.HasField("shape"):
            continue
        dims = tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            shapes[value.name] = tuple(d.dim_value for d in dims)
    for init in graph.initializer:
        shapes[init.name] = tuple(init.dims)
    return shapes


def _fold(node: onnx.NodeProto, known: Mapping[str, np.ndarray], static: Mapping[str, tuple[int, ...]],
          opset: Mapping[str, int]) -> list[np.ndarray] | None:
    """The node's output values when they are constants, else None."""
    if node.domain not in ("", "ai.onnx") or node.op_type in _NOT_FOLDED:
        return None
    if node.op_type in ("Shape", "Size") and node.input[0] in static:
        shape = static[node.input[0]]
        if node.op_type == "Size":
            return [np.array(int(np.prod(shape)), np.int64)]
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        start, end = attrs.get("start", 0), attrs.get("end", len(shape))
        return [np.array(shape[start:end], np.int64)]
    inputs = [name for name in node.input if name]
    if (not inputs and node.op_type != "Constant") or any(name not in known for name in inputs):
        return None
    if any(name in static and int(np.prod(static[name])) > MAX_FOLDED_ELEMENTS for name in node.output):
        return None
    return _evaluate(node, known, opset)


def _evaluate(node: onnx.NodeProto, known: Mapping[str, np.ndarray], opset: Mapping[str, int]) -> list | None:
    from onnx.reference import ReferenceEvaluator

    try:
        evaluator = ReferenceEvaluator(helper.make_graph(
            [node], "fold",
            [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(known[name].dtype), None)
             for name in dict.fromkeys(n for n in node.input if n)],
            [helper.make_tensor_value_info(name, onnx.TensorProto.UNDEFINED, None) for name in node.output],
        ), opsets={"": opset.get("", opset.get("ai.onnx", 17))})
        outputs = evaluator.run(None, {name: known[name] for name in node.input if name})
    except Exception:  # noqa: BLE001 - the reference lacks some operators; the node stays
        return None
    values = [np.asarray(out) for out in outputs]
    if any(v.dtype == object or v.size > MAX_FOLDED_ELEMENTS for v in values):
        return None
    return values

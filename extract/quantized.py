"""A layer program with low-bit weights: its Relax rewrite, its kernels and its float64 reference.

:func:`quantize_model` takes an imported config model (:mod:`extract.decoder`) and a
:class:`~extract.quant.WeightFormat` and returns the same program over quantized weights:

- **Which weights.** The linear projections: every 2-D weight parameter of ``main`` whose
  only use is ``permute_dims(W, [1, 0])`` feeding the right operand of ``matmul`` (how
  TVM's torch importer writes ``torch.nn.Linear``: q/k/v/o, gate/up/down). Norm scales
  and biases stay float32.
- **The program.** Each such ``W`` becomes its stored arrays (:mod:`extract.quant`) as
  parameters in its place (``{name}`` then ``{name}_scale``), and each ``matmul(x,
  permute_dims(W))`` becomes one TE kernel (``call_tir``) that reads the stored arrays
  and dequantizes each weight inside the product's reduction, as it is loaded: there is
  no dequantized copy of the weight, neither in ``main`` nor in the kernel (the kernel
  allocates nothing weight-sized). bfloat16 and int8 kernels read ``x`` and the cast
  weight in the product (int8's per-row scale multiplies the sum, after the reduction:
  ``sum_k x q s = s sum_k x q``); the int4 kernel unpacks the nibble and multiplies by
  its group's scale inside the reduction. Verified by ``tests/extract/test_quantized.py``,
  which lowers the program (:func:`tuner.kernels.lower_to_kernels`, TVM's FuseOps and
  FuseTIR) and checks that every kernel that reads a packed weight is one PrimFunc whose
  buffers allocated inside are smaller than the weight, and that no kernel writes a
  float32 tensor of a weight's shape.
- **The e-graph.** The kernel's ``call_tir`` is an opaque e-node
  (:mod:`extract.translate`): rewrites that match a ``matmul`` (transpose folds, Q/K/V
  and gate/up merges, norm prologues, packed layouts) do not fire on these GEMMs; the
  rest of the layer (attention, softmax, SiLU) is rewritten as for float weights.
  Work on weights alone is therefore never formed around a quantized weight, so
  :func:`tuner.compile.prepare_weights` lifts none of it. The kernel's pattern is
  TVM's ``kOutEWiseFusable`` (``op_pattern`` 4), so FuseOps still fuses an elementwise
  epilogue into it (the gate GEMM with the SiLU and the product with up). The kernels
  are tuned from TVM's schedule space; the register-blocked and split-k seeds of float
  GEMMs do not apply to them.
- **Reference.** :meth:`ImportedModel.reference_outputs` of the returned model is the
  PyTorch module of the same config and seed in float64, its quantized weights replaced
  by their float64 dequantized values (:meth:`extract.quant.QuantizedWeight.dequantize`)
  and its inputs cast to float64: the same quantized model, computed in float64.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax, te

from measure.tvmapi import tirx

from .imported import ImportedModel, ModelImportError, readonly, stable_hash
from .quant import WEIGHT_DTYPES, QuantizationError, QuantizedWeight, WeightFormat, format_nbytes, quantize

__all__ = ["CHECK_TOLERANCE", "QuantizedModel", "dequant_dense_te", "linear_weights", "quantize_model"]

CHECK_TOLERANCE = 1e-4
"""``rtol`` and ``atol`` of check (a): a quantized program's outputs against the float64 reference of the
same quantized model (:func:`tuner.compile.verify`). A float32 program is off by float32 rounding only
(about 1e-7 on the tiny configs' layers); a wrong dequantization is off by the weights' scale."""

SCALE_SUFFIX = "_scale"
"""Suffix of the parameter that holds a quantized weight's scales."""


@dataclass(frozen=True)
class QuantizedModel:
    """A model whose linear weights are stored in ``format``.

    Attributes
    ----------
    model : ImportedModel
        The rewritten program, its parameters the stored arrays (``params``), its
        reference the float64 computation of the same quantized model.
    format : WeightFormat
    weights : dict of str to QuantizedWeight
        The quantized weights by their float parameter's name.
    float_params_bytes : int
        Bytes of every weight of the float32 model (norm scales included).
    float_reference : callable
        The float32 PyTorch model's outputs (:meth:`ImportedModel.reference_outputs` of the
        model before quantization): what check (b) compares against.
    """

    model: ImportedModel
    format: WeightFormat
    weights: dict[str, QuantizedWeight]
    float_params_bytes: int
    float_reference: Callable[[], tuple[np.ndarray, ...] | None]

    @property
    def resident_bytes(self) -> int:
        """Bytes of every weight the program holds (stored arrays and scales, plus the float32 norm scales)."""
        return sum(int(p.nbytes) for p in self.model.params)

    def weight_bytes(self) -> dict:
        """The weights' bytes: ``resident`` (this run), ``float32``, their ``ratio``, and ``by_format``:
        the resident bytes in every format of :data:`extract.quant.WEIGHT_DTYPES` (int4 at this run's
        group size, else 32), the float32 norm scales included in each."""
        others = self.resident_bytes - sum(w.nbytes for w in self.weights.values())
        group = self.format.group_size or 32
        by_format = {}
        for dtype in WEIGHT_DTYPES:
            fmt = WeightFormat(dtype, group if dtype == "int4" else None)
            by_format[fmt.label] = others + sum(format_nbytes(*w.shape, fmt) for w in self.weights.values())
        return {"resident": self.resident_bytes, "float32": self.float_params_bytes,
                "ratio": self.resident_bytes / self.float_params_bytes, "by_format": by_format}

    def cost(self, outputs: tuple[np.ndarray, ...]) -> dict:
        """What quantization costs: ``outputs`` (a program's, one per output of ``main``) against the float32
        PyTorch model's (:attr:`float_reference`).

        Returns ``{"max_abs_error", "max_rel_error", "outputs": {name: {"max_abs_error", "max_rel_error"}}}``;
        an output's relative error is its max absolute error over the float32 output's max magnitude.
        Empty when the float model has no reference.
        """
        reference = self.float_reference()
        if reference is None:
            return {}
        per = {}
        for name, got, ref in zip(self.model.output_names, outputs, reference, strict=True):
            diff = float(np.max(np.abs(np.asarray(got, np.float64) - ref))) if ref.size else 0.0
            scale = float(np.max(np.abs(ref))) if ref.size else 0.0
            per[name] = {"max_abs_error": diff, "max_rel_error": diff / scale if scale else 0.0}
        return {"max_abs_error": max(e["max_abs_error"] for e in per.values()),
                "max_rel_error": max(e["max_rel_error"] for e in per.values()), "outputs": per}


def dequant_dense_te(x: te.Tensor, fmt: WeightFormat, *stored: te.Tensor) -> te.Tensor:
    """TE of ``x @ W^T`` over a weight ``W [N, K]`` stored in ``fmt``, dequantized as it is read.

    ``x [..., K]`` float32; ``stored`` the arrays of :class:`extract.quant.QuantizedWeight`
    (bfloat16 ``[N, K]``; int8 ``[N, K]`` and float32 scale ``[N]``; uint8 ``[N, K / 2]`` and
    float32 scale ``[N, K / group]``). Returns ``[..., N]`` float32.
    """
    kdim = x.shape[-1]
    n = stored[0].shape[0]
    k = te.reduce_axis((0, kdim), name="k")
    w = stored[0]
    if fmt.dtype in ("bfloat16", "int8"):
        prod = te.compute((*x.shape[:-1], n), lambda *i: te.sum(x[(*i[:-1], k)] * w[i[-1], k].astype("float32"),
                                                                 axis=k), name=f"dense_{fmt.dtype}")
        if fmt.dtype == "bfloat16":
            return prod
        scale = stored[1]
        return te.compute(prod.shape, lambda *i: prod[i] * scale[i[-1]], name="dense_int8_scale")
    scale, group = stored[1], fmt.group_size

    def weight(row, col):
        byte = w[row, col // 2]
        nibble = (byte >> ((col % 2) * 4).astype("uint8")) & tirx.const(0xF, "uint8")
        return (nibble.astype("int32") - 8).astype("float32") * scale[row, col // group]

    return te.compute((*x.shape[:-1], n), lambda *i: te.sum(x[(*i[:-1], k)] * weight(i[-1], k), axis=k),
                      name="dense_int4")


def linear_weights(func: relax.Function) -> dict[relax.Var, list[relax.Var]]:
    """The linear weights of ``main``: weight parameter -> the ``permute_dims(W, [1, 0])`` variables that
    transpose it, for each 2-D weight used only that way and each such transpose used only as a ``matmul``'s
    right operand."""
    num_input = int(func.attrs["num_input"])
    bound = dict(relax.analysis.get_var2val(func).items())
    uses: dict[relax.Var, list[tuple[relax.Call | None, int]]] = {}

    def note(expr, position):
        if isinstance(expr, relax.Var):
            uses.setdefault(expr, []).append(position)

    for value in bound.values():
        if isinstance(value, relax.Call):
            for i, arg in enumerate(value.args):
                note(arg, (value, i))
        else:
            relax.analysis.post_order_visit(value, lambda e: note(e, (None, -1)))
    relax.analysis.post_order_visit(func.body.body, lambda e: note(e, (None, -1)))
    matmul, transpose = tvm.ir.Op.get("relax.matmul"), tvm.ir.Op.get("relax.permute_dims")
    found = {}
    for param in func.params[num_input:]:
        if len(param.ty.shape) != 2 or not uses.get(param):
            continue
        transposes = []
        for var, value in bound.items():
            if isinstance(value, relax.Call) and value.op.same_as(transpose) and value.args[0].same_as(param):
                transposes.append(var)
        ok = len(transposes) == len(uses[param]) and all(
            [int(a) for a in bound[t].attrs.axes] == [1, 0] and uses.get(t) and all(
                call is not None and call.op.same_as(matmul) and i == 1 for call, i in uses[t])
            for t in transposes)
        if ok and transposes:
            found[param] = transposes
    return found


def _rewrite(mod: tvm.IRModule, weights: dict[str, QuantizedWeight]) -> tvm.IRModule:
    """``mod`` with each weight of ``weights`` (by parameter name) stored as its arrays and its GEMMs as
    :func:`dequant_dense_te` kernels (see the module docstring)."""
    func = mod["main"]
    linear = linear_weights(func)
    by_name = {p.name: p for p in linear}
    new_params, stored_vars, transposed = [], {}, {}
    for param in func.params:
        qw = weights.get(param.name) if param in linear else None
        if qw is None:
            new_params.append(param)
            continue
        names = [param.name, param.name + SCALE_SUFFIX][: len(qw.arrays)]
        parts = [relax.Var(nm, relax.TensorType(a.shape, str(a.dtype))) for nm, a in zip(names, qw.arrays)]
        new_params += parts
        stored_vars[param.name] = parts
        transposed.update(dict.fromkeys(linear[param], param.name))
    if missing := sorted(set(weights) - set(by_name)):
        raise QuantizationError(f"{missing[0]} is not a linear weight of the program")
    matmul = tvm.ir.Op.get("relax.matmul")

    @relax.expr_functor.mutator
    class Rewriter(relax.PyExprMutator):
        def visit_call_(self, call):
            if call.op.same_as(matmul) and call.args[1] in transposed:
                name = transposed[call.args[1]]
                fmt = weights[name].format
                x = self.visit_expr(call.args[0])
                return self.builder_.call_te(
                    lambda xx, *s: dequant_dense_te(xx, fmt, *s), x, *stored_vars[name],
                    primfunc_name_hint=f"dense_{fmt.dtype}")
            return super().visit_call_(call)

    rewriter = Rewriter(mod)
    body = rewriter.visit_expr(func.body)
    new_func = relax.Function(new_params, body, func.ret_ty, func.is_pure, func.attrs)
    new_func = relax.analysis.remove_all_unused(new_func)
    out = rewriter.builder_.get()
    out["main"] = new_func
    return out


def quantize_model(model: ImportedModel, fmt: WeightFormat,
                   torch_model: Callable[[], tuple[object, dict[str, np.ndarray]]]) -> QuantizedModel:
    """``model`` with its linear weights quantized to ``fmt`` (round to nearest, :func:`extract.quant.quantize`).

    Parameters
    ----------
    model : ImportedModel
        A config model as :func:`extract.frontend.import_model` returns it.
    fmt : WeightFormat
        Not float32.
    torch_model : callable
        Returns the model's PyTorch module and float32 inputs by name, the same weights and
        inputs as ``model`` (:func:`extract.frontend.torch_module`); called once, for the
        float64 reference.

    Raises
    ------
    QuantizationError
        An int4 group size that does not divide a weight's K; a model with no linear weight.
    """
    linear = {p.name for p in linear_weights(model.mod["main"])}
    if not linear:
        raise QuantizationError("the program has no linear weight to quantize")
    weights = {name: quantize(array, fmt, name) for name, array in zip(model.param_names, model.params)
               if name in linear}
    mod = _rewrite(model.mod, weights)
    params, names = [], []
    for name, array in zip(model.param_names, model.params):
        parts = weights[name].arrays if name in weights else (array,)
        params += [readonly(a) for a in parts]
        names += [name, name + SCALE_SUFFIX][: len(parts)]

    @functools.cache
    def reference() -> tuple[np.ndarray, ...]:
        return _float64_reference(torch_model, weights)

    quantized = dataclasses.replace(
        model, mod=mod, params=tuple(params), param_names=tuple(names), source=f"{model.source} weights={fmt.label}",
        model_hash=stable_hash(model.model_hash, fmt.label), _reference=reference)
    return QuantizedModel(quantized, fmt, weights, sum(int(p.nbytes) for p in model.params), model.reference_outputs)


def _float64_reference(torch_model, weights: dict[str, QuantizedWeight]) -> tuple[np.ndarray, ...]:
    """The PyTorch module in float64 with the dequantized weights, on the inputs in float64."""
    import torch

    module, arrays = torch_model()
    module = module.double()
    params = {"p_" + name.replace(".", "_"): p for name, p in module.named_parameters()}
    with torch.no_grad():
        for name, qw in weights.items():
            if name not in params:
                raise ModelImportError(f"internal: weight {name} has no parameter in the PyTorch module")
            params[name].copy_(torch.from_numpy(qw.dequantize()))
        inputs = {name: torch.from_numpy(np.asarray(a, dtype=np.float64)) for name, a in arrays.items()}
        hidden = inputs.pop("hidden_states")
        return tuple(readonly(out.numpy().copy()) for out in module(hidden, **inputs))

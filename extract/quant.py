"""Round-to-nearest quantization of a linear layer's weight ``W [N, K]`` (``y = x @ W^T``).

Formats (the choices of ``tune run --weights-dtype``):

- ``float32``: the weight as it is (4 bytes a weight).
- ``bfloat16``: the weight rounded to nearest-even bfloat16 (2 bytes a weight); computed in float32.
- ``int8``: symmetric per output channel: ``q int8 [N, K]`` in ``[-127, 127]`` and
  ``scale float32 [N]`` with ``scale = max|W[n, :]| / 127``; ``W ~ q * scale[:, None]``
  (the per-channel scheme of LLM.int8's weights and ONNX Runtime's ``MatMulInteger``).
- ``int4``: symmetric group-wise along K (llama.cpp's Q4_0, GPTQ/AWQ without zero
  points): each group of ``group`` consecutive weights of a row has ``scale =
  max|w| / 7``, ``q = clip(round(w / scale), -8, 7)``; two nibbles per byte, ``q + 8``,
  the even ``k`` in the low nibble: ``packed uint8 [N, K / 2]`` and
  ``scale float32 [N, K / group]``.

Rounding is to nearest (ties to even, NumPy's ``rint``). A row or group of zeros gets
scale 1 (its weights quantize to 0 exactly). Only NumPy is used here; the kernels that
read these arrays are in :mod:`extract.quantized`.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

__all__ = [
    "GROUP_SIZES",
    "WEIGHT_DTYPES",
    "QuantizationError",
    "QuantizedWeight",
    "WeightFormat",
    "check_config",
    "format_nbytes",
    "pack_int4",
    "quantize",
    "unpack_int4",
]

WEIGHT_DTYPES = ("float32", "bfloat16", "int8", "int4")
"""The weight formats, as ``--weights-dtype`` names them."""
GROUP_SIZES = (32, 128)
"""The int4 group sizes along K (``--group-size``)."""
INT8_MAX = 127
INT4_MIN, INT4_MAX = -8, 7


class QuantizationError(ValueError):
    """A weight that cannot be stored in the format asked (a group size that does not divide K); one line."""


@dataclass(frozen=True)
class WeightFormat:
    """A weight format: ``dtype`` of :data:`WEIGHT_DTYPES` and, for int4, ``group_size`` (else None).

    Raises
    ------
    QuantizationError
        An unknown dtype, a group size outside :data:`GROUP_SIZES`, or one given for a dtype other than int4.
    """

    dtype: str = "float32"
    group_size: int | None = None

    def __post_init__(self) -> None:
        if self.dtype not in WEIGHT_DTYPES:
            raise QuantizationError(f"unsupported weights dtype {self.dtype!r}; expected one of "
                                    f"{', '.join(WEIGHT_DTYPES)}")
        if self.dtype == "int4":
            if self.group_size not in GROUP_SIZES:
                raise QuantizationError(f"int4 group size must be one of {', '.join(map(str, GROUP_SIZES))}, "
                                        f"got {self.group_size}")
        elif self.group_size is not None:
            raise QuantizationError(f"a group size applies to int4 weights only, not {self.dtype}")

    @property
    def label(self) -> str:
        """``"int4-g32"``, ``"int8"``, ...: the format in one word."""
        return f"{self.dtype}-g{self.group_size}" if self.group_size else self.dtype

    def check_k(self, k: int, what: str) -> None:
        """Raise :class:`QuantizationError` when the int4 group size does not divide ``k`` (``what``: the weight)."""
        if self.group_size and k % self.group_size:
            raise QuantizationError(f"--group-size {self.group_size} does not divide K={k} of {what}")


@dataclass(frozen=True)
class QuantizedWeight:
    """A weight ``W [N, K]`` in a format: its stored ``arrays`` (see the module docstring for each format).

    ``arrays`` is ``(W,)`` for float32, ``(W bfloat16,)``, ``(q int8, scale [N])`` or
    ``(packed uint8 [N, K/2], scale [N, K/group])``.
    """

    format: WeightFormat
    arrays: tuple[np.ndarray, ...]
    shape: tuple[int, int]

    @property
    def nbytes(self) -> int:
        """Resident bytes of the stored arrays, scales included."""
        return sum(int(a.nbytes) for a in self.arrays)

    def dequantize(self) -> np.ndarray:
        """The weight the format stores, float64 ``[N, K]`` (exact: every stored value and product is a float64)."""
        dtype = self.format.dtype
        if dtype in ("float32", "bfloat16"):
            return self.arrays[0].astype(np.float64)
        if dtype == "int8":
            q, scale = self.arrays
            return q.astype(np.float64) * scale.astype(np.float64)[:, None]
        packed, scale = self.arrays
        return unpack_int4(packed).astype(np.float64) * np.repeat(scale.astype(np.float64), self.format.group_size,
                                                                  axis=1)


def quantize(weight: np.ndarray, fmt: WeightFormat, what: str = "the weight") -> QuantizedWeight:
    """Quantize a float weight ``[N, K]`` to ``fmt`` by rounding to nearest.

    Raises
    ------
    QuantizationError
        A weight that is not 2-D, or an int4 group size that does not divide K (``what`` names the weight).
    """
    w = np.asarray(weight, dtype=np.float32)
    if w.ndim != 2:
        raise QuantizationError(f"{what} has shape {w.shape}: only 2-D weights [N, K] are quantized")
    fmt.check_k(w.shape[1], what)
    if fmt.dtype == "float32":
        arrays = (w,)
    elif fmt.dtype == "bfloat16":
        arrays = (w.astype(ml_dtypes.bfloat16),)
    elif fmt.dtype == "int8":
        scale = _scales(np.max(np.abs(w), axis=1), INT8_MAX)
        arrays = (np.clip(np.rint(w / scale[:, None]), -INT8_MAX, INT8_MAX).astype(np.int8), scale)
    else:
        n, k = w.shape
        groups = w.reshape(n, k // fmt.group_size, fmt.group_size)
        scale = _scales(np.max(np.abs(groups), axis=2), INT4_MAX)
        q = np.clip(np.rint(groups / scale[..., None]), INT4_MIN, INT4_MAX).astype(np.int8)
        arrays = (pack_int4(q.reshape(n, k)), scale)
    return QuantizedWeight(fmt, arrays, tuple(w.shape))


def _scales(amax: np.ndarray, qmax: int) -> np.ndarray:
    scale = (amax / qmax).astype(np.float32)
    scale[scale == 0] = 1.0
    return scale


def pack_int4(q: np.ndarray) -> np.ndarray:
    """int4 values ``[N, K]`` (int8 in ``[-8, 7]``, K even) -> ``uint8 [N, K / 2]``: ``q + 8``, even k low."""
    u = (q.astype(np.int16) - INT4_MIN).astype(np.uint8)
    return (u[:, 0::2] | (u[:, 1::2] << 4)).astype(np.uint8)


def unpack_int4(packed: np.ndarray) -> np.ndarray:
    """The inverse of :func:`pack_int4`: ``uint8 [N, K / 2]`` -> int8 ``[N, K]`` in ``[-8, 7]``."""
    low = (packed & 0xF).astype(np.int8) + INT4_MIN
    high = (packed >> 4).astype(np.int8) + INT4_MIN
    return np.stack([low, high], axis=-1).reshape(packed.shape[0], -1)


def check_config(fmt: WeightFormat, config: dict) -> None:
    """Check that the int4 group size divides every projection's K of a transformers ``config``: the hidden size
    (q/k/v, gate/up), the attention width ``heads * head_dim`` (o) and the intermediate size (down).

    Raises
    ------
    QuantizationError
        One that it does not divide, named.
    """
    hidden = int(config["hidden_size"])
    head_dim = int(config.get("head_dim") or hidden // int(config["num_attention_heads"]))
    for what, k in (("hidden_size", hidden), ("num_attention_heads * head_dim",
                                              int(config["num_attention_heads"]) * head_dim),
                    ("intermediate_size", int(config["intermediate_size"]))):
        fmt.check_k(k, f"the projections reading {what}")


def format_nbytes(n: int, k: int, fmt: WeightFormat) -> int:
    """Resident bytes of a weight ``[N, K]`` in ``fmt``, scales included (what :attr:`QuantizedWeight.nbytes` gives).

    float32 ``4NK``, bfloat16 ``2NK``, int8 ``NK + 4N``, int4 ``NK / 2 + 4 N K / group``.
    """
    if fmt.dtype == "float32":
        return 4 * n * k
    if fmt.dtype == "bfloat16":
        return 2 * n * k
    if fmt.dtype == "int8":
        return n * k + 4 * n
    return n * k // 2 + 4 * n * (k // fmt.group_size)

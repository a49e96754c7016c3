"""Round-to-nearest quantizers of extract.quant: error bounds, int4 packing, formats and their bytes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from extract.quant import (
    GROUP_SIZES,
    WEIGHT_DTYPES,
    QuantizationError,
    WeightFormat,
    check_config,
    format_nbytes,
    pack_int4,
    quantize,
    unpack_int4,
)
from tuner import options


@pytest.fixture
def weight() -> np.ndarray:
    rng = np.random.default_rng(3)
    w = rng.standard_normal((48, 256)).astype(np.float32) * rng.uniform(0.01, 2.0, (48, 1)).astype(np.float32)
    w[5] = 0.0  # a row of zeros
    return w


def test_the_cli_offers_the_formats_the_quantizers_know():
    assert options.WEIGHT_DTYPES == WEIGHT_DTYPES and options.GROUP_SIZES == GROUP_SIZES


def test_int8_is_per_row_symmetric_within_half_a_step(weight):
    qw = quantize(weight, WeightFormat("int8"))
    q, scale = qw.arrays
    assert q.dtype == np.int8 and q.shape == weight.shape and scale.dtype == np.float32 and scale.shape == (48,)
    assert np.abs(q).max() == 127 and q.min() >= -127
    amax = np.abs(weight).max(axis=1)
    np.testing.assert_allclose(scale[amax > 0], amax[amax > 0] / 127, rtol=1e-6)
    err = np.abs(qw.dequantize() - weight)
    assert np.all(err <= scale[:, None] / 2 * (1 + 1e-6))
    assert np.all(qw.dequantize()[5] == 0)


@pytest.mark.parametrize("group", GROUP_SIZES)
def test_int4_is_groupwise_along_k_within_half_a_step(weight, group):
    qw = quantize(weight, WeightFormat("int4", group))
    packed, scale = qw.arrays
    assert packed.dtype == np.uint8 and packed.shape == (48, 128)
    assert scale.dtype == np.float32 and scale.shape == (48, 256 // group)
    steps = np.repeat(scale, group, axis=1)
    err = np.abs(qw.dequantize() - weight)
    assert np.all(err <= steps / 2 * (1 + 1e-6))
    groups = np.abs(weight).reshape(48, -1, group).max(axis=2)
    np.testing.assert_allclose(scale[groups > 0], groups[groups > 0] / 7, rtol=1e-6)
    # a finer group never does worse on the largest error of a row
    if group == 128:
        fine = quantize(weight, WeightFormat("int4", 32))
        assert np.abs(fine.dequantize() - weight).max() <= err.max()


def test_bfloat16_rounds_to_nearest_within_half_an_ulp(weight):
    qw = quantize(weight, WeightFormat("bfloat16"))
    (stored,) = qw.arrays
    assert stored.dtype == ml_dtypes.bfloat16
    nonzero = weight != 0
    rel = np.abs(qw.dequantize() - weight)[nonzero] / np.abs(weight[nonzero])
    assert rel.max() <= 2.0 ** -8  # 8 significant bits: half a step is 2^-8 of the value at most
    assert rel.max() > 0  # the weights were rounded


def test_int4_packing_round_trips_every_value_even_k_in_the_low_nibble():
    q = np.array([np.arange(-8, 8), np.arange(7, -9, -1)], dtype=np.int8)
    packed = pack_int4(q)
    assert packed.dtype == np.uint8 and packed.shape == (2, 8)
    assert packed[0, 0] == ((-8 + 8) | ((-7 + 8) << 4))  # q[0, 0] low, q[0, 1] high
    np.testing.assert_array_equal(unpack_int4(packed), q)


def test_bytes_of_each_format_and_int4_under_0_3x_float32(weight):
    for dtype in WEIGHT_DTYPES:
        fmt = WeightFormat(dtype, 32 if dtype == "int4" else None)
        assert quantize(weight, fmt).nbytes == format_nbytes(*weight.shape, fmt), dtype
    f32 = format_nbytes(*weight.shape, WeightFormat())
    assert format_nbytes(*weight.shape, WeightFormat("int4", 32)) <= 0.3 * f32
    assert format_nbytes(*weight.shape, WeightFormat("int4", 128)) < format_nbytes(*weight.shape,
                                                                                    WeightFormat("int4", 32))


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda: WeightFormat("fp8"), "unsupported weights dtype 'fp8'"),
        (lambda: WeightFormat("int8", 32), "int4 weights only"),
        (lambda: WeightFormat("int4", 64), "group size must be one of 32, 128"),
        (lambda: quantize(np.zeros((4, 96), np.float32), WeightFormat("int4", 128), "w"),
         "--group-size 128 does not divide K=96 of w"),
        (lambda: check_config(WeightFormat("int4", 128), {"hidden_size": 64, "num_attention_heads": 4,
                                                          "intermediate_size": 128}),
         "does not divide K=64 of the projections reading hidden_size"),
    ],
    ids=["dtype", "group-for-int8", "group-size", "group-not-dividing-k", "config-k"],
)
def test_bad_formats_are_one_line_errors(make, needle):
    with pytest.raises(QuantizationError) as err:
        make()
    assert needle in str(err.value) and "\n" not in str(err.value)

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.quant import reference as Q


def error_bound(x, scale_per_element):
    """e4m3: half an ulp is <= 2^-4 of a normal value; subnormals (below 2^-6 s) are spaced 2^-9 s."""
    return torch.maximum(x.abs() * 2.0 ** -4, scale_per_element * 2.0 ** -10) * (1 + 1e-6)


@pytest.mark.parametrize("shape", [(3, 512), (2, 5, 128), (1, 128)])
def test_fp8_block_round_trip(shape):
    x = torch.randn(shape) * torch.logspace(-3, 3, shape[-1])
    q, scales = Q.fp8_block_quantize(x)
    assert q.dtype == torch.float8_e4m3fn and scales.shape == (*shape[:-1], shape[-1] // 128)
    back = Q.fp8_block_dequantize(q, scales)
    per_element = scales.repeat_interleave(128, dim=-1)
    assert ((back - x).abs() <= error_bound(x, per_element)).all()


def test_mxfp8_round_trip_and_power_of_two_scales():
    x = torch.randn(4, 256) * torch.logspace(-4, 2, 256)
    q, e8m0 = Q.mxfp8_quantize(x)
    assert e8m0.dtype == torch.uint8 and e8m0.shape == (4, 8)
    scales = Q.e8m0_to_float(e8m0)
    assert torch.equal(torch.exp2(torch.log2(scales).round()), scales)
    back = Q.mxfp8_dequantize(q, e8m0)
    assert ((back - x).abs() <= error_bound(x, scales.repeat_interleave(32, dim=-1))).all()


def test_scale_is_the_smallest_that_avoids_clipping():
    x = torch.randn(64, 32) * 7
    q, e8m0 = Q.mxfp8_quantize(x)
    amax = x.abs().amax(-1)
    scale = Q.e8m0_to_float(e8m0[:, 0])
    assert (amax / scale <= 448).all() and (amax / (scale / 2) > 448).all()
    assert q.float().abs().max() <= 448


def test_zero_block_is_finite():
    q, scales = Q.fp8_block_quantize(torch.zeros(1, 128))
    assert torch.isfinite(scales).all() and torch.equal(Q.fp8_block_dequantize(q, scales), torch.zeros(1, 128))


def test_bad_width_is_rejected():
    with pytest.raises(ValueError, match="multiple of the block size"):
        Q.mxfp8_quantize(torch.randn(2, 40))


def test_mxfp4_dequantize_known_values():
    # byte 0x3A: low nibble 0xA = -1.0, high nibble 0x3 = 1.5; byte 0xF7: 6.0 then -6.0
    packed = torch.tensor([[0x3A, 0xF7] + [0] * 14], dtype=torch.uint8)
    scales = torch.tensor([[128]], dtype=torch.uint8)  # 2^(128-127) = 2
    out = Q.mxfp4_dequantize(packed, scales)
    assert out.shape == (1, 32)
    assert out[0, :4].tolist() == [-2.0, 3.0, 12.0, -12.0] and (out[0, 4:] == 0).all()

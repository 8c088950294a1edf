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


def test_mxfp4_quantize_inverts_dequantize_on_representable_values():
    gen = torch.Generator().manual_seed(0)
    packed = torch.randint(0, 256, (5, 7, 48), dtype=torch.uint8, generator=gen)
    scales = torch.randint(115, 140, (5, 7, 3), dtype=torch.uint8, generator=gen)
    # a block whose largest magnitude is below 4 would be given a smaller scale: make each block hold a 6
    packed[..., ::16] = 0x07
    values = Q.mxfp4_dequantize(packed, scales)
    again = Q.mxfp4_quantize(values)
    assert torch.equal(Q.mxfp4_dequantize(*again), values)
    assert torch.equal(again[1], scales)


def test_mxfp4_quantize_rounds_to_nearest_with_ties_to_the_even_code():
    x = torch.tensor([[0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.75, 0.2, 2.9, 4.9, 6.0] + [0.0] * 20])
    out = Q.mxfp4_dequantize(*Q.mxfp4_quantize(x))
    assert out[0, :12].tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, -1.0, 0.0, 3.0, 4.0, 6.0]


def test_mxfp4_scale_is_the_smallest_without_clipping_and_error_is_half_a_step():
    x = torch.randn(64, 128, generator=torch.Generator().manual_seed(1)) * torch.logspace(-3, 3, 64)[:, None]
    packed, scales = Q.mxfp4_quantize(x)
    scale = Q.e8m0_to_float(scales).repeat_interleave(32, dim=-1)
    amax = x.abs().reshape(64, 4, 32).amax(-1)
    assert ((amax / Q.e8m0_to_float(scales) <= 6) & (amax / Q.e8m0_to_float(scales) > 3)).all()
    magnitude = x.abs() / scale
    half_step = torch.where(magnitude < 2, 0.25, torch.where(magnitude < 4, 0.5, 1.0)) * scale
    assert ((Q.mxfp4_dequantize(packed, scales) - x).abs() <= half_step * (1 + 1e-6)).all()

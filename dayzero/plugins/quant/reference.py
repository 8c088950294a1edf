"""FP8 formats of the layered quantization scheme (docs/models.md), in pure torch.

* FP8 per tile (latent KV cache): tiles of 128 along the last dim, fp32 scale s = 2^ceil(log2(max(amax,1e-4)/448)),
  q = e4m3(x / s).
* MXFP8 (indexer Q/K): blocks of 32, the same round-up power-of-two scale stored as E8M0 (uint8, 2^(E-127)).

Rounding the exponent up means |x / s| <= 448 always: no element is clipped, and the write and read sides agree
on the scale bit for bit.
"""

from __future__ import annotations

import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0
AMAX_FLOOR = 1e-4
FP8_TILE = 128
MX_BLOCK = 32
E8M0_BIAS = 127


def _blocks(x: torch.Tensor, block: int) -> torch.Tensor:
    if x.shape[-1] % block:
        raise ValueError(f"last dim {x.shape[-1]} is not a multiple of the block size {block}")
    return x.float().reshape(*x.shape[:-1], x.shape[-1] // block, block)


def pow2_scale_exponent(amax: torch.Tensor) -> torch.Tensor:
    """Exponent e (int32) of the smallest power-of-two scale 2^e with amax / 2^e <= 448."""
    return torch.ceil(torch.log2(amax.clamp_min(AMAX_FLOOR) / FP8_MAX)).to(torch.int32)


def _quantize_blocks(x: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    blocks = _blocks(x, block)
    exponent = pow2_scale_exponent(blocks.abs().amax(-1))
    scale = torch.exp2(exponent.float())
    q = (blocks / scale[..., None]).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return q.reshape(x.shape), exponent


def _dequantize_blocks(q: torch.Tensor, scale: torch.Tensor, block: int, dtype: torch.dtype) -> torch.Tensor:
    values = _blocks(q.float(), block) * scale[..., None]
    return values.reshape(q.shape).to(dtype)


def fp8_block_quantize(x: torch.Tensor, block: int = FP8_TILE) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., D] -> (e4m3 [..., D], fp32 scales [..., D/block])."""
    q, exponent = _quantize_blocks(x, block)
    return q, torch.exp2(exponent.float())


def fp8_block_dequantize(
    q: torch.Tensor, scales: torch.Tensor, block: int = FP8_TILE, dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    return _dequantize_blocks(q, scales.float(), block, dtype)


def mxfp8_quantize(x: torch.Tensor, block: int = MX_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., D] -> (e4m3 [..., D], E8M0 scales uint8 [..., D/block])."""
    q, exponent = _quantize_blocks(x, block)
    return q, (exponent + E8M0_BIAS).to(torch.uint8)


def e8m0_to_float(scales: torch.Tensor) -> torch.Tensor:
    return torch.exp2(scales.to(torch.int32).float() - E8M0_BIAS)


def mxfp8_dequantize(
    q: torch.Tensor, scales: torch.Tensor, block: int = MX_BLOCK, dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    return _dequantize_blocks(q, e8m0_to_float(scales), block, dtype)


E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def mxfp4_dequantize(packed: torch.Tensor, scales: torch.Tensor, block: int = MX_BLOCK,
                     dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """MXFP4 (E2M1 pairs in uint8, low nibble = even element; E8M0 scale per `block`) -> [..., 2 * packed.shape[-1]].

    The format of released K3 expert weights (`*.weight_packed` + `*.weight_scale`).
    """
    table = torch.tensor(E2M1_VALUES + tuple(-v for v in E2M1_VALUES), device=packed.device)
    nibbles = torch.stack([packed & 0x0F, packed >> 4], dim=-1).flatten(-2).long()
    values = table[nibbles]
    return _dequantize_blocks(values, e8m0_to_float(scales), block, dtype)


E2M1_MAX = 6.0


def mxfp4_quantize(x: torch.Tensor, block: int = MX_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., K] (K even, a multiple of `block`) -> (packed uint8 [..., K/2], E8M0 scales uint8 [..., K/block]),
    the layout mxfp4_dequantize reads.

    The scale is the smallest power of two with amax / scale <= 6 (nothing clips); each element rounds to the
    nearest E2M1 value, ties to the even code, as OCP MX specifies.
    """
    blocks = _blocks(x, block)
    exponent = torch.ceil(torch.log2(blocks.abs().amax(-1).clamp_min(2.0 ** -120) / E2M1_MAX)).to(torch.int32)
    scaled = blocks / torch.exp2(exponent.float())[..., None]
    magnitude = scaled.abs()
    # E2M1's spacing is 0.5 below 2, 1 below 4, 2 up to 6; torch.round halves to even, which is the even code
    step = torch.where(magnitude < 2, 0.5, torch.where(magnitude < 4, 1.0, 2.0))
    rounded = torch.round(magnitude / step) * step
    codes = torch.searchsorted(torch.tensor(E2M1_VALUES, device=x.device), rounded) + 8 * (scaled < 0).long()
    codes = codes.reshape(*x.shape[:-1], x.shape[-1] // 2, 2).to(torch.uint8)
    packed = codes[..., 0] | (codes[..., 1] << 4)
    return packed, (exponent + E8M0_BIAS).to(torch.uint8)

"""Triton kernels of the FP8 block formats (docs/models.md): quantize, dequantize, and the device functions
the fused cache writes (paged_cache/kernel.py) share.

Every step is bit-exact with reference.py, on the CPU (Triton interpreter) and on CUDA:
* the scale exponent reproduces `ceil(log2(max(amax, 1e-4) / 448))` as torch computes it in fp32, including the
  few amax just above 448 * 2^k where the fp32 log2 rounds down to the integer k (the reference then clamps);
  torch divides by the scalar 448 on the CPU but multiplies by its fp32 reciprocal on CUDA, so the launchers pick
  the same variant by device (`RECIPROCAL_DIVIDE`);
* e4m3 and bf16 rounding are integer code (round to nearest even, as torch's casts), because the interpreter's own
  float8 / bfloat16 casts round differently.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from dayzero.plugins import device as device_info

FP8_MAX: tl.constexpr = tl.constexpr(448.0)
AMAX_FLOOR: tl.constexpr = tl.constexpr(1e-4)
# the fp32 value of 1/448, which CUDA torch multiplies by for `t / 448.0`
RECIP_FP8_MAX: tl.constexpr = tl.constexpr(torch.tensor(1.0 / 448.0, dtype=torch.float32).item())
# first-order log2(1 + m 2^-23) per unit of m
LOG2_PER_ULP: tl.constexpr = tl.constexpr(2.0 ** -23 / math.log(2.0))
ELEMENTS_PER_PROGRAM = 4096


@triton.jit
def pow2_exponent(amax, RECIPROCAL_DIVIDE: tl.constexpr):
    """amax fp32 [...] -> int32 e of the scale 2^e that reference.pow2_scale_exponent picks."""
    a = tl.maximum(amax, AMAX_FLOOR)
    if RECIPROCAL_DIVIDE:
        r = a * RECIP_FP8_MAX
    else:
        r = tl.math.div_rn(a, FP8_MAX)
    bits = r.to(tl.int32, bitcast=True)
    k = ((bits >> 23) & 0xFF) - 127
    # fp32 log2(r) = fl(k + log2(1 + m 2^-23)); it lands back on k only for a small mantissa m and a large |k|,
    # where the first-order fraction is accurate enough to decide; clamping keeps large m above k as well
    fraction = tl.minimum((bits & 0x7FFFFF).to(tl.float32) * LOG2_PER_ULP, 0.5)
    k_float = k.to(tl.float32)
    return k + ((k_float + fraction) > k_float).to(tl.int32)


@triton.jit
def pow2(e):
    """int32 e -> fp32 2^e (exact, for -126 <= e <= 127)."""
    return ((e + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def e4m3_encode(x):
    """fp32 x with |x| <= 448 -> float8_e4m3fn bit patterns (uint8), rounded to nearest even."""
    bits = x.to(tl.int32, bitcast=True)
    sign = (bits >> 24) & 0x80
    magnitude = bits & 0x7FFFFFFF
    # normal range: drop 20 mantissa bits with round-to-nearest-even, rebias the exponent from 127 to 7
    normal = ((magnitude + 0x7FFFF + ((magnitude >> 20) & 1)) >> 20) - (120 << 3)
    # below 2^-6 the codes are multiples of 2^-9: adding and removing 2^23 rounds |x| * 2^9 to an integer (RNE)
    subnormal = ((tl.abs(x) * 512.0 + 8388608.0) - 8388608.0).to(tl.int32)
    return (tl.where(magnitude < 0x3C800000, subnormal, normal) | sign).to(tl.uint8)


@triton.jit
def e4m3_decode(codes):
    """float8_e4m3fn bit patterns (uint8) -> fp32 (exact; 0x7F / 0xFF are NaN)."""
    c = codes.to(tl.int32)
    exponent = (c >> 3) & 0xF
    mantissa = c & 0x7
    # NaN as a bit pattern: a float NaN constant would not survive Inductor's copy of the kernel source
    normal = tl.where((c & 0x7F) == 0x7F, 0x7FC00000, ((exponent + 120) << 23) | (mantissa << 20))
    magnitude = tl.where(exponent == 0, mantissa.to(tl.float32) * 0.001953125, normal.to(tl.float32, bitcast=True))
    # the sign as a bit: the GPU build of `where(sign, -m, m)` turned code 0x80 (-0) into +0
    return (magnitude.to(tl.int32, bitcast=True) | ((c & 0x80) << 24)).to(tl.float32, bitcast=True)


@triton.jit
def bf16_bits(x):
    """fp32 -> int32 holding the bf16 bit pattern of x rounded to nearest even (low 16 bits)."""
    bits = x.to(tl.int32, bitcast=True)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
    # the GPU's NaN (0x7FFFFFFF) would round up into the sign bit and become -0
    return tl.where(x != x, 0x7FC0, rounded)


@triton.jit
def cast_rne(x, dtype: tl.constexpr):
    """fp32 x -> dtype, rounding to nearest even (bf16 by integer code: the interpreter's cast truncates)."""
    if dtype == tl.bfloat16:
        return bf16_bits(x).to(tl.int16).to(tl.bfloat16, bitcast=True)
    else:
        return x.to(dtype)


@triton.jit
def quantize_rows(x, RECIPROCAL_DIVIDE: tl.constexpr):
    """x fp32 [R, B], one block per row -> (e4m3 codes uint8 [R, B], scale exponents int32 [R])."""
    e = pow2_exponent(tl.max(tl.abs(x), axis=1), RECIPROCAL_DIVIDE)
    y = x * pow2(-e)[:, None]
    return e4m3_encode(tl.minimum(tl.maximum(y, -FP8_MAX), FP8_MAX)), e


@triton.jit
def encode_scale(e, dtype: tl.constexpr):
    """Scale exponents -> stored scales: E8M0 (uint8, e + 127) or fp32 2^e."""
    if dtype == tl.uint8:
        return (e + 127).to(tl.uint8)
    else:
        return pow2(e)


@triton.jit
def decode_scale(scales):
    """Stored scales (E8M0 uint8 or fp32) -> fp32."""
    if scales.dtype == tl.uint8:
        e = scales.to(tl.int32)
        # E8M0 zero is 2^-127, an fp32 subnormal (bit 22 alone)
        return tl.where(e == 0, 0x00400000, e << 23).to(tl.float32, bitcast=True)
    else:
        return scales.to(tl.float32)


@triton.jit
def _quantize_kernel(x, q, scales, num_blocks, BLOCK: tl.constexpr, BLOCK_P2: tl.constexpr, ROWS: tl.constexpr,
                     RECIPROCAL_DIVIDE: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_P2)
    row_mask = rows < num_blocks
    mask = row_mask[:, None] & (cols < BLOCK)[None, :]
    offsets = rows[:, None] * BLOCK + cols[None, :]
    values = tl.load(x + offsets, mask=mask, other=0.0).to(tl.float32)
    codes, e = quantize_rows(values, RECIPROCAL_DIVIDE)
    tl.store(q.to(tl.pointer_type(tl.uint8)) + offsets, codes, mask=mask)
    tl.store(scales + rows, encode_scale(e, scales.dtype.element_ty), mask=row_mask)


@triton.jit
def _dequantize_kernel(q, scales, out, num_blocks, BLOCK: tl.constexpr, BLOCK_P2: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_P2)
    row_mask = rows < num_blocks
    mask = row_mask[:, None] & (cols < BLOCK)[None, :]
    offsets = rows[:, None] * BLOCK + cols[None, :]
    codes = tl.load(q.to(tl.pointer_type(tl.uint8)) + offsets, mask=mask, other=0)
    scale = decode_scale(tl.load(scales + rows, mask=row_mask, other=0))
    values = e4m3_decode(codes) * scale[:, None]
    tl.store(out + offsets, cast_rne(values, out.dtype.element_ty), mask=mask)


def _grid(num_blocks: int, block: int) -> tuple[tuple[int], int, int]:
    block_p2 = triton.next_power_of_2(block)
    rows = max(1, ELEMENTS_PER_PROGRAM // block_p2)
    return (triton.cdiv(num_blocks, rows),), block_p2, rows


def _check_blocks(values: torch.Tensor, scales: torch.Tensor) -> tuple[int, int]:
    """(number of blocks, block size) of values [..., D] with scales [..., D / block]; both contiguous."""
    assert values.is_contiguous() and scales.is_contiguous(), "block kernels need contiguous tensors"
    assert values.shape[:-1] == scales.shape[:-1], f"values {tuple(values.shape)} vs scales {tuple(scales.shape)}"
    assert scales.shape[-1] > 0 and values.shape[-1] % scales.shape[-1] == 0, "D must be a multiple of the block"
    assert scales.dtype in (torch.uint8, torch.float32), f"scales are E8M0 (uint8) or fp32, got {scales.dtype}"
    return scales.numel(), values.shape[-1] // scales.shape[-1]


def quantize_launcher(x: torch.Tensor, q: torch.Tensor, scales: torch.Tensor, launch=None) -> None:
    """x [..., D] (fp32 / bf16 / fp16) -> q [..., D] (e4m3, or uint8 codes) and scales [..., D / block]:
    uint8 scales mean MXFP8 (E8M0), fp32 scales FP8 per tile; the block is D / scales.shape[-1]."""
    num_blocks, block = _check_blocks(x, scales)
    assert q.shape == x.shape and q.is_contiguous() and q.dtype in (torch.float8_e4m3fn, torch.uint8)
    assert x.dtype in (torch.float32, torch.bfloat16, torch.float16), f"unsupported input dtype {x.dtype}"
    if num_blocks == 0:
        return
    grid, block_p2, rows = _grid(num_blocks, block)
    kernel = launch(_quantize_kernel) if launch else _quantize_kernel
    kernel[grid](x, q, scales, num_blocks, block, block_p2, rows, device_info.on_gpu(x.device))


def dequantize_launcher(q: torch.Tensor, scales: torch.Tensor, out: torch.Tensor, launch=None) -> None:
    """q [..., D] (e4m3, or uint8 codes), scales [..., D / block] (E8M0 uint8 or fp32) -> out [..., D]."""
    num_blocks, block = _check_blocks(q, scales)
    assert q.dtype in (torch.float8_e4m3fn, torch.uint8), f"q must be e4m3, got {q.dtype}"
    assert out.shape == q.shape and out.is_contiguous(), f"out {tuple(out.shape)} vs q {tuple(q.shape)}"
    assert out.dtype in (torch.float32, torch.bfloat16, torch.float16), f"unsupported output dtype {out.dtype}"
    if num_blocks == 0:
        return
    grid, block_p2, rows = _grid(num_blocks, block)
    kernel = launch(_dequantize_kernel) if launch else _dequantize_kernel
    kernel[grid](q, scales, out, num_blocks, block, block_p2, rows)

"""The paged K/V cache of a GQA layer (docs/ops.md, "Cache layouts"): shapes, and the reference write and read.

Plain, in the model dtype, `[P, 2, Hkv, PAGE_SIZE, D]`: per page, K then V; per KV head its 64 rows of D, so one
head's page is one contiguous `[64, D]` tile.
FP8, `uint8 [P, 2, Hkv, PAGE_SIZE * (D + 1)]`: per page, K then V, per KV head the 64 rows of D e4m3 values, then
their 64 E8M0 scales (one per token and head, `2^(E - 127)`: the smallest power of two with amax / scale <= 448,
quant/reference.py), so a head's values stay one aligned tile.
The format is told by the dtype: uint8 means FP8. A new token's row is `slot_mapping[t] = page * 64 + offset`
(-1: not written).
"""

from __future__ import annotations

import torch

from dayzero.plugins.paged_cache.reference import PAGE_SIZE, physical_rows
from dayzero.plugins.quant.reference import mxfp8_dequantize, mxfp8_quantize

KEYS, VALUES = 0, 1


def kv_cache_shape(num_pages: int, num_kv_heads: int, head_dim: int, fp8: bool) -> tuple[int, ...]:
    if fp8:
        return (num_pages, 2, num_kv_heads, PAGE_SIZE * (head_dim + 1))
    return (num_pages, 2, num_kv_heads, PAGE_SIZE, head_dim)


def is_fp8(cache: torch.Tensor) -> bool:
    return cache.dtype == torch.uint8


def head_dim_of(cache: torch.Tensor) -> int:
    return cache.shape[-1] // PAGE_SIZE - 1 if is_fp8(cache) else cache.shape[-1]


def fp8_views(cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """values uint8 [P, 2, Hkv, 64, D] and scales uint8 [P, 2, Hkv, 64] views of an FP8 cache."""
    dim = head_dim_of(cache)
    values = cache[..., : PAGE_SIZE * dim].unflatten(-1, (PAGE_SIZE, dim))
    return values, cache[..., PAGE_SIZE * dim :]


def _token_major(t: torch.Tensor) -> torch.Tensor:
    """[P, 2, Hkv, 64, ...] -> a view [P, 64, 2, Hkv, ...], indexed by (page, offset)."""
    return t.movedim(3, 1)


def write_kv(cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """cache <- k, v [T, Hkv, D] at slot_mapping [T] (in place; -1 skipped), FP8-quantized for a uint8 cache."""
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    page, offset = slots // PAGE_SIZE, slots % PAGE_SIZE
    rows = torch.stack([k[keep], v[keep]], dim=1)  # [n, 2, Hkv, D]
    if not is_fp8(cache):
        _token_major(cache)[page, offset] = rows.to(cache.dtype)
        return
    codes, scales = mxfp8_quantize(rows, block=rows.shape[-1])
    values, scale_view = fp8_views(cache)
    _token_major(values)[page, offset] = codes.view(torch.uint8)
    _token_major(scale_view)[page, offset] = scales[..., 0]


def gather_kv(cache: torch.Tensor, block_table_row: torch.Tensor,
              positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(k, v) [S, Hkv, D] fp32 (dequantized) of logical `positions` of one sequence."""
    rows = physical_rows(block_table_row, positions)
    page, offset = rows // PAGE_SIZE, rows % PAGE_SIZE
    if is_fp8(cache):
        values, scales = fp8_views(cache)
        codes = _token_major(values)[page, offset].view(torch.float8_e4m3fn)
        kv = mxfp8_dequantize(codes, _token_major(scales)[page, offset][..., None], block=codes.shape[-1])
    else:
        kv = _token_major(cache)[page, offset].float()
    return kv[:, KEYS], kv[:, VALUES]

"""Triton write of the step's K / V rows into the paged GQA cache (cache_layout.py), bit-exact with its reference.

One program per token scatters its 2 * Hkv rows of D (K heads, then V heads) to their pages; into an FP8 cache it
quantizes each row on the way (one power-of-two scale per row, stored as an E8M0 byte after the page's values).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dayzero.plugins import device as device_info
from dayzero.plugins.gqa.cache_layout import head_dim_of, is_fp8, kv_cache_shape
from dayzero.plugins.paged_cache.reference import PAGE_SIZE
from dayzero.plugins.quant.kernel import cast_rne, quantize_rows


@triton.jit
def _write_kv_kernel(cache, k, v, slot_mapping, stride_kt, stride_kh, stride_vt, stride_vh, HKV: tl.constexpr,
                     D: tl.constexpr, ROWS: tl.constexpr, D_PAD: tl.constexpr, PAGE: tl.constexpr,
                     FP8: tl.constexpr, RECIPROCAL_DIVIDE: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping + token).to(tl.int64)
    if slot < 0:
        return
    # row r is K (r < HKV) or V of head r % HKV
    r = tl.arange(0, ROWS)
    head = r % HKV
    is_k = r < HKV
    c = tl.arange(0, D_PAD)
    col_ok = (c < D)[None, :]
    k_ok = is_k[:, None] & col_ok
    v_ok = (~is_k & (r < 2 * HKV))[:, None] & col_ok
    x = tl.load(k + token * stride_kt + head[:, None] * stride_kh + c[None, :], mask=k_ok, other=0.0).to(tl.float32)
    x += tl.load(v + token * stride_vt + head[:, None] * stride_vh + c[None, :], mask=v_ok, other=0.0).to(tl.float32)
    ok = k_ok | v_ok
    # (page, K|V, head) tile of each row
    tile = ((slot // PAGE) * 2 + (r >= HKV).to(tl.int64)) * HKV + head
    offset = slot % PAGE
    if FP8:
        codes, e = quantize_rows(x, RECIPROCAL_DIVIDE)
        base = cache + tile * (PAGE * (D + 1))
        tl.store(base[:, None] + offset * D + c[None, :], codes, mask=ok)
        tl.store(base + PAGE * D + offset, (e + 127).to(tl.uint8), mask=r < 2 * HKV)
    else:
        dst = cache + (tile * PAGE + offset)[:, None] * D + c[None, :]
        tl.store(dst, cast_rne(x, cache.dtype.element_ty), mask=ok)


def write_kv_launcher(cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slot_mapping: torch.Tensor,
                      launch=None) -> None:
    """cache <- k, v [T, Hkv, D] (unit last stride) at slot_mapping [T] (-1 skipped)."""
    tokens, heads, dim = k.shape
    assert v.shape == k.shape and k.stride(-1) == 1 and v.stride(-1) == 1, (
        f"k {tuple(k.shape)} and v {tuple(v.shape)} must be [T, Hkv, D] with unit last stride")
    assert slot_mapping.shape == (tokens,), f"slot_mapping {tuple(slot_mapping.shape)} vs {tokens} tokens"
    assert cache.is_contiguous() and head_dim_of(cache) == dim, f"cache {tuple(cache.shape)} vs head_dim {dim}"
    assert tuple(cache.shape[1:]) == kv_cache_shape(1, heads, dim, is_fp8(cache))[1:], (
        f"cache {tuple(cache.shape)} does not hold {heads} KV heads of {dim}")
    if tokens == 0:
        return
    kernel = launch(_write_kv_kernel) if launch else _write_kv_kernel
    kernel[(tokens,)](cache, k, v, slot_mapping, k.stride(0), k.stride(1), v.stride(0), v.stride(1), HKV=heads, D=dim,
                      ROWS=triton.next_power_of_2(2 * heads), D_PAD=triton.next_power_of_2(dim), PAGE=PAGE_SIZE,
                      FP8=is_fp8(cache), RECIPROCAL_DIVIDE=device_info.on_gpu(k.device))

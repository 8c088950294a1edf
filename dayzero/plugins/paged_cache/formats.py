"""Byte layouts of the quantized paged caches (docs/ops.md, cache layouts), reference pack / unpack.

Latent KV, FP8 record (656 B/token for c_kv 512 + k_pe 64), cache `uint8 [P, PAGE_SIZE, 656]`:
    bytes [0, 512)    c_kv as e4m3, four tiles of 128
    bytes [512, 528)  four fp32 tile scales (power of two, docs/models.md)
    bytes [528, 656)  k_pe as 64 bf16 (unquantized: the rope part is small and precision-sensitive)
(other widths: c_kv a multiple of 128, the same order of parts).
Indexer keys, MXFP8 (132 B/token), cache `uint8 [P, PAGE_SIZE * 132]`, page-major:
    bytes [0, 64*DI)           the page's 64 rows of DI e4m3 values
    bytes [64*DI, 64*DI*33/32) their E8M0 scales, DI/32 per row
Plain formats keep rows as they are: latent `[P, PAGE_SIZE, 576]` and index `[P, PAGE_SIZE, DI]` in bf16 / fp32.
Pooled index keys (GLM-5.3, pools of kpool tokens) keep R = ceil(PAGE_SIZE / kpool) rows a page instead of
PAGE_SIZE, in the same two formats (`[P, R, DI]`, or page-major `[P, R * (DI + DI/32)]`): the pool ending at
position e lives in the page of e, at row (e % PAGE_SIZE) // kpool.
The format of a cache tensor is told by its dtype: uint8 means quantized.
write_latent / write_index_keys here are the reference writes (the spec); `paged_cache.write_latent` /
`write_index_keys` are the registered in-place ops (op.py) that run the fused Triton writes on CUDA.
"""

from __future__ import annotations

import torch

from dayzero.plugins.paged_cache.reference import PAGE_SIZE, physical_rows
from dayzero.plugins.quant.reference import (
    FP8_TILE,
    MX_BLOCK,
    fp8_block_dequantize,
    fp8_block_quantize,
    mxfp8_dequantize,
    mxfp8_quantize,
)


def fp8_latent_record_bytes(nope_dim: int, rope_dim: int) -> int:
    """Bytes of one FP8 latent record: 656 for Kimi / DeepSeek (512 + 64)."""
    return nope_dim + 4 * (nope_dim // FP8_TILE) + 2 * rope_dim


def fp8_latent_nope_dim(record_bytes: int, rope_dim: int) -> int:
    return (record_bytes - 2 * rope_dim) * FP8_TILE // (FP8_TILE + 4)


def mxfp8_row_bytes(dim: int) -> int:
    return dim + dim // MX_BLOCK


def is_quantized(cache: torch.Tensor) -> bool:
    return cache.dtype == torch.uint8


def pack_fp8_latent(rows: torch.Tensor, rope_dim: int) -> torch.Tensor:
    """rows [T, nope + rope] -> records uint8 [T, record bytes] (576 -> 656)."""
    nope, rope = rows[:, : rows.shape[1] - rope_dim], rows[:, rows.shape[1] - rope_dim :]
    q, scales = fp8_block_quantize(nope)
    parts = [q.view(torch.uint8), scales.float().contiguous().view(torch.uint8),
             rope.to(torch.bfloat16).contiguous().view(torch.uint8)]
    return torch.cat(parts, dim=1)


def unpack_fp8_latent(records: torch.Tensor, rope_dim: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """records uint8 [T, record bytes] -> rows [T, nope + rope]."""
    nope = fp8_latent_nope_dim(records.shape[1], rope_dim)
    tiles = nope // FP8_TILE
    q = records[:, :nope].contiguous().view(torch.float8_e4m3fn)
    scales = records[:, nope : nope + 4 * tiles].contiguous().view(torch.float32)
    rope = records[:, nope + 4 * tiles :].contiguous().view(torch.bfloat16)
    return torch.cat([fp8_block_dequantize(q, scales, dtype=dtype), rope.to(dtype)], dim=1)


def _index_page_views(cache: torch.Tensor, dim: int, rows: int = PAGE_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """values uint8 [P, rows, dim] and scales uint8 [P, rows, dim/32] views of a page-major MXFP8 cache."""
    pages = cache.shape[0]
    values = cache[:, : rows * dim].view(pages, rows, dim)
    scales = cache[:, rows * dim :].view(pages, rows, dim // MX_BLOCK)
    return values, scales


def write_latent(cache: torch.Tensor, rows: torch.Tensor, slot_mapping: torch.Tensor, rope_dim: int) -> None:
    """Latent cache <- rows [T, nope + rope] at slot_mapping (-1 skipped), quantizing for an FP8 cache."""
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    flat = cache.view(-1, cache.shape[-1])
    flat[slots] = pack_fp8_latent(rows[keep], rope_dim) if is_quantized(cache) else rows[keep].to(cache.dtype)


def gather_latent(cache: torch.Tensor, block_table_row: torch.Tensor, positions: torch.Tensor,
                  rope_dim: int) -> torch.Tensor:
    """Latent rows [S, nope + rope] (fp32) of logical `positions` of one sequence."""
    flat = cache.view(-1, cache.shape[-1])[physical_rows(block_table_row, positions)]
    return unpack_fp8_latent(flat, rope_dim) if is_quantized(cache) else flat.float()


def write_index_keys(cache: torch.Tensor, keys: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Index cache <- keys [T, DI] at slot_mapping (-1 skipped), MXFP8-quantizing for a uint8 cache."""
    keep = slot_mapping >= 0
    store_index_rows(cache, keys[keep], slot_mapping[keep].long(), PAGE_SIZE)


def store_index_rows(cache: torch.Tensor, keys: torch.Tensor, rows: torch.Tensor, rows_per_page: int) -> None:
    """Index cache of `rows_per_page` rows a page <- keys [n, DI] at flat rows (page * rows_per_page + row)."""
    if not is_quantized(cache):
        cache.view(-1, cache.shape[-1])[rows] = keys.to(cache.dtype)
        return
    q, scales = mxfp8_quantize(keys)
    values, scale_view = _index_page_views(cache, keys.shape[1], rows_per_page)
    values[rows // rows_per_page, rows % rows_per_page] = q.view(torch.uint8)
    scale_view[rows // rows_per_page, rows % rows_per_page] = scales


def load_index_rows(cache: torch.Tensor, rows: torch.Tensor, dim: int, rows_per_page: int) -> torch.Tensor:
    """Index keys [n, DI] (fp32, dequantized) at flat rows of a cache of `rows_per_page` rows a page."""
    if not is_quantized(cache):
        return cache.view(-1, cache.shape[-1])[rows].float()
    values, scales = _index_page_views(cache, dim, rows_per_page)
    page, offset = rows // rows_per_page, rows % rows_per_page
    return mxfp8_dequantize(values[page, offset].view(torch.float8_e4m3fn), scales[page, offset])


def gather_index_keys(cache: torch.Tensor, block_table_row: torch.Tensor, positions: torch.Tensor,
                      dim: int) -> torch.Tensor:
    """Index keys [S, DI] (fp32, dequantized) of logical `positions` of one sequence."""
    return load_index_rows(cache, physical_rows(block_table_row, positions), dim, PAGE_SIZE)


def latent_cache_shape(num_pages: int, nope_dim: int, rope_dim: int, quantized: bool) -> tuple[int, ...]:
    if not quantized:
        return (num_pages, PAGE_SIZE, nope_dim + rope_dim)
    if nope_dim % FP8_TILE:
        raise ValueError(f"an FP8 latent cache needs kv_lora_rank to be a multiple of {FP8_TILE}, got {nope_dim}")
    return (num_pages, PAGE_SIZE, fp8_latent_record_bytes(nope_dim, rope_dim))


def index_cache_shape(num_pages: int, dim: int, quantized: bool, kpool: int = 1) -> tuple[int, ...]:
    """Index keys of one token (kpool 1) or one pool of kpool tokens a row."""
    rows = pooled_rows_per_page(kpool)
    return (num_pages, rows * mxfp8_row_bytes(dim)) if quantized else (num_pages, rows, dim)


def pooled_rows_per_page(kpool: int) -> int:
    """Rows a page of pooled index keys needs: the pools ending in one page of PAGE_SIZE positions."""
    return -(-PAGE_SIZE // kpool)


def pooled_row(page: torch.Tensor, position: torch.Tensor, kpool: int) -> torch.Tensor:
    """The flat row of the pool that ends at `position` (in physical `page`)."""
    return page * pooled_rows_per_page(kpool) + position % PAGE_SIZE // kpool

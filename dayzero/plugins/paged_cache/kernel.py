"""Triton cache writes: scatter new token rows into a paged cache by slot_mapping (-1 skipped), in the formats of
formats.py. Plain caches take the rows as they are; the quantized ones quantize on the way in (fused):
* FP8 latent records: c_kv in e4m3 tiles of 128 with fp32 power-of-two scales, then k_pe as bf16;
* MXFP8 index keys: e4m3 blocks of 32 with E8M0 scales, page-major (a page's 64 value rows, then its scales).
Each program writes several tokens, one quantization block per row of its tile. Bit-exact with formats.py.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dayzero.plugins import device as device_info
from dayzero.plugins.paged_cache.reference import PAGE_SIZE
from dayzero.plugins.quant.kernel import bf16_bits, cast_rne, quantize_rows
from dayzero.plugins.quant.reference import FP8_TILE, MX_BLOCK

# tokens per program of the fused writes: a tile of about 2048 elements
LATENT_TOKENS = 4
INDEX_TOKENS = 16


@triton.jit
def store_bytes(ptr, words, WIDTH: tl.constexpr, mask):
    """Store the low WIDTH bytes of int32 `words` little-endian at byte pointers `ptr` (any alignment)."""
    for b in tl.static_range(WIDTH):
        tl.store(ptr + b, ((words >> (8 * b)) & 0xFF).to(tl.uint8), mask=mask)


@triton.jit
def _write_rows_kernel(cache, rows, slot_mapping, D: tl.constexpr, BLOCK_D: tl.constexpr):
    token = tl.program_id(0)
    slot = tl.load(slot_mapping + token).to(tl.int64)
    if slot < 0:
        return
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = cols < D
    values = tl.load(rows + token.to(tl.int64) * D + cols, mask=mask)
    tl.store(cache + slot * D + cols, cast_rne(values.to(tl.float32), cache.dtype.element_ty), mask=mask)


@triton.jit
def _write_fp8_latent_kernel(cache, rows, slot_mapping, num_tokens, NOPE: tl.constexpr, ROPE: tl.constexpr,
                             TOKENS: tl.constexpr, BLOCK_TILES: tl.constexpr, BLOCK_ROPE: tl.constexpr,
                             RECIPROCAL_DIVIDE: tl.constexpr):
    TILE: tl.constexpr = 128
    NUM_TILES: tl.constexpr = NOPE // TILE
    RECORD: tl.constexpr = NOPE + 4 * NUM_TILES + 2 * ROPE
    first = tl.program_id(0).to(tl.int64) * TOKENS
    # c_kv: one row per (token, tile)
    r = tl.arange(0, TOKENS * BLOCK_TILES)
    token, tile = first + r // BLOCK_TILES, r % BLOCK_TILES
    slot = tl.load(slot_mapping + token, mask=token < num_tokens, other=-1).to(tl.int64)
    live = (slot >= 0) & (tile < NUM_TILES)
    cols = tl.arange(0, TILE)
    src = rows + token[:, None] * (NOPE + ROPE) + tile[:, None] * TILE + cols[None, :]
    codes, e = quantize_rows(tl.load(src, mask=live[:, None], other=0.0).to(tl.float32), RECIPROCAL_DIVIDE)
    record = cache + slot * RECORD
    tl.store(record[:, None] + tile[:, None] * TILE + cols[None, :], codes, mask=live[:, None])
    store_bytes(record + NOPE + tile * 4, (e + 127) << 23, 4, live)
    # k_pe: one row per token, kept as bf16
    token = first + tl.arange(0, TOKENS)
    slot = tl.load(slot_mapping + token, mask=token < num_tokens, other=-1).to(tl.int64)
    pe_cols = tl.arange(0, BLOCK_ROPE)
    pe_mask = (slot >= 0)[:, None] & (pe_cols < ROPE)[None, :]
    pe = tl.load(rows + token[:, None] * (NOPE + ROPE) + NOPE + pe_cols[None, :], mask=pe_mask, other=0.0)
    pe_dst = cache + slot[:, None] * RECORD + NOPE + 4 * NUM_TILES + 2 * pe_cols[None, :]
    store_bytes(pe_dst, bf16_bits(pe.to(tl.float32)), 2, pe_mask)


@triton.jit
def _write_mxfp8_index_kernel(cache, keys, slot_mapping, num_tokens, DIM: tl.constexpr, PAGE: tl.constexpr,
                              TOKENS: tl.constexpr, BLOCK_BLOCKS: tl.constexpr, RECIPROCAL_DIVIDE: tl.constexpr):
    BLOCK: tl.constexpr = 32
    NUM_BLOCKS: tl.constexpr = DIM // BLOCK
    # one row per (token, block of 32)
    r = tl.arange(0, TOKENS * BLOCK_BLOCKS)
    token, block = tl.program_id(0).to(tl.int64) * TOKENS + r // BLOCK_BLOCKS, r % BLOCK_BLOCKS
    slot = tl.load(slot_mapping + token, mask=token < num_tokens, other=-1).to(tl.int64)
    live = (slot >= 0) & (block < NUM_BLOCKS)
    cols = tl.arange(0, BLOCK)
    src = keys + token[:, None] * DIM + block[:, None] * BLOCK + cols[None, :]
    codes, e = quantize_rows(tl.load(src, mask=live[:, None], other=0.0).to(tl.float32), RECIPROCAL_DIVIDE)
    page = cache + (slot // PAGE) * (PAGE * (DIM + NUM_BLOCKS))
    offset = slot % PAGE
    tl.store(page[:, None] + offset[:, None] * DIM + block[:, None] * BLOCK + cols[None, :], codes, mask=live[:, None])
    tl.store(page + PAGE * DIM + offset * NUM_BLOCKS + block, (e + 127).to(tl.uint8), mask=live)


def _check_rows(cache: torch.Tensor, rows: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    assert cache.is_contiguous() and rows.is_contiguous(), "cache writes need a contiguous cache and rows"
    assert rows.dim() == 2 and slot_mapping.shape == (rows.shape[0],), (
        f"rows {tuple(rows.shape)} [T, D] vs slot_mapping {tuple(slot_mapping.shape)} [T]")
    assert rows.dtype in (torch.float32, torch.bfloat16, torch.float16), f"unsupported rows dtype {rows.dtype}"


def write_rows_launcher(cache: torch.Tensor, rows: torch.Tensor, slot_mapping: torch.Tensor, launch=None) -> None:
    """cache [P, PAGE, D] <- rows [T, D] at slot_mapping [T] (-1 skipped); `launch` wraps the kernel (wrap_triton)."""
    assert cache.is_contiguous() and rows.is_contiguous(), "write_rows needs contiguous cache and rows"
    assert rows.dim() == 2 and cache.shape[-1] == rows.shape[1], f"rows {tuple(rows.shape)} vs cache {cache.shape}"
    assert slot_mapping.shape == (rows.shape[0],)
    tokens, dim = rows.shape
    if tokens == 0:
        return
    block = min(triton.next_power_of_2(dim), 1024)
    kernel = launch(_write_rows_kernel) if launch else _write_rows_kernel
    kernel[(tokens, triton.cdiv(dim, block))](cache, rows, slot_mapping, dim, block)


def write_fp8_latent_launcher(cache: torch.Tensor, rows: torch.Tensor, slot_mapping: torch.Tensor, rope_dim: int,
                              launch=None) -> None:
    """FP8 latent cache uint8 [P, PAGE, record] <- rows [T, nope + rope] (c_kv | k_pe) at slot_mapping [T]."""
    _check_rows(cache, rows, slot_mapping)
    nope = rows.shape[1] - rope_dim
    assert nope > 0 and nope % FP8_TILE == 0, f"c_kv width {nope} must be a positive multiple of {FP8_TILE}"
    record = nope + 4 * (nope // FP8_TILE) + 2 * rope_dim
    assert cache.dtype == torch.uint8 and cache.dim() == 3 and cache.shape[1:] == (PAGE_SIZE, record), (
        f"an FP8 latent cache for rows {tuple(rows.shape)} is uint8 [P, {PAGE_SIZE}, {record}], got "
        f"{cache.dtype} {tuple(cache.shape)}")
    tokens = rows.shape[0]
    if tokens == 0:
        return
    kernel = launch(_write_fp8_latent_kernel) if launch else _write_fp8_latent_kernel
    kernel[(triton.cdiv(tokens, LATENT_TOKENS),)](
        cache, rows, slot_mapping, tokens, nope, rope_dim, LATENT_TOKENS, triton.next_power_of_2(nope // FP8_TILE),
        triton.next_power_of_2(max(rope_dim, 1)), device_info.on_gpu(rows.device))


def write_mxfp8_index_launcher(cache: torch.Tensor, keys: torch.Tensor, slot_mapping: torch.Tensor,
                               launch=None) -> None:
    """MXFP8 index cache uint8 [P, PAGE * (DI + DI/32)] (page-major) <- keys [T, DI] at slot_mapping [T]."""
    _check_rows(cache, keys, slot_mapping)
    dim = keys.shape[1]
    assert dim % MX_BLOCK == 0, f"index key width {dim} must be a multiple of {MX_BLOCK}"
    page_bytes = PAGE_SIZE * (dim + dim // MX_BLOCK)
    assert cache.dtype == torch.uint8 and cache.dim() == 2 and cache.shape[1] == page_bytes, (
        f"an MXFP8 index cache for keys of width {dim} is uint8 [P, {page_bytes}], got {cache.dtype} "
        f"{tuple(cache.shape)}")
    tokens = keys.shape[0]
    if tokens == 0:
        return
    kernel = launch(_write_mxfp8_index_kernel) if launch else _write_mxfp8_index_kernel
    kernel[(triton.cdiv(tokens, INDEX_TOKENS),)](
        cache, keys, slot_mapping, tokens, dim, PAGE_SIZE, INDEX_TOKENS, triton.next_power_of_2(dim // MX_BLOCK),
        device_info.on_gpu(keys.device))

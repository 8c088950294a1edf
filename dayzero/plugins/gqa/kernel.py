"""Triton grouped-query attention over the paged K/V cache (cache_layout.py): prefill and decode, one kernel.

A program owns the `group` query heads of one KV head for up to TOKENS consecutive tokens of one sequence (M =
TOKENS * group rows of both dots, plan.py) and walks the keys 0..max position of its tokens in blocks of BLOCK_N:
each block's K and V rows are loaded once through the block table (FP8 rows dequantized in registers with their
per-row scales), scored with one dot, masked causally per row by position, and folded into an online softmax.
When the grid is too small for the GPU, each key range is split across programs (flash-decoding) and
sparse_mla/combine_kernel.py merges the partial (o, lse).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dayzero.plugins.gqa import plan
from dayzero.plugins.gqa.cache_layout import head_dim_of, is_fp8, kv_cache_shape
from dayzero.plugins.output_buffer import output_like
from dayzero.plugins.paged_cache.reference import PAGE_SIZE
from dayzero.plugins.quant.kernel import e4m3_decode
from dayzero.plugins.sparse_mla.combine_kernel import combine_splits_launcher
from dayzero.plugins.sparse_mla.schedule import dense_block_schedule
from dayzero.plugins.triton_utils import INTERPRETED, mma, online_softmax_step

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)
SUPPORTED_Q = (torch.bfloat16, torch.float16, torch.float32)


@triton.jit
def _e4m3_to_float(codes):
    """float8_e4m3fn bytes -> fp32: the hardware conversion, or integer code under the interpreter (whose float8
    casts differ)."""
    if INTERPRETED:
        out = e4m3_decode(codes)
    else:
        out = codes.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    return out


@triton.jit
def _load_rows(cache, page, kv, head, offset, n_ok, num_kv_heads, dtype: tl.constexpr, D: tl.constexpr,
               D_PAD: tl.constexpr, PAGE: tl.constexpr, FP8: tl.constexpr):
    """K (kv = 0) or V rows [BLOCK_N, D_PAD] of `head` at (page, offset) [BLOCK_N] in `dtype`, 0 outside n_ok."""
    d = tl.arange(0, D_PAD)
    ok = n_ok[:, None] & (d < D)[None, :]
    tile = (page.to(tl.int64) * 2 + kv) * num_kv_heads + head
    if FP8:
        base = cache + tile * (PAGE * (D + 1))
        codes = tl.load(base[:, None] + offset[:, None] * D + d[None, :], mask=ok, other=0)
        scale = tl.load(base + PAGE * D + offset, mask=n_ok, other=127).to(tl.int32)
        # E8M0 2^(e - 127) as fp32 bits (e = 0 is 2^-127, a subnormal)
        scale = tl.where(scale == 0, 0x00400000, scale << 23).to(tl.float32, bitcast=True)
        rows = (_e4m3_to_float(codes) * scale[:, None]).to(dtype)
    else:
        rows = tl.load(cache + (tile * PAGE + offset)[:, None] * D + d[None, :], mask=ok, other=0.0).to(dtype)
    return rows


@triton.jit
def _gqa_attention_kernel(
    q, cache, block_table, positions, block_seq, block_first, cu_seqlens, o, o_part, lse_part,
    sm_scale, num_tokens, num_kv_heads, num_splits, stride_qt, stride_qh, stride_bt,
    GROUP: tl.constexpr, TOKENS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
    D_PAD: tl.constexpr, PAGE: tl.constexpr, FP8: tl.constexpr, SPLIT: tl.constexpr, PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    block = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq = tl.load(block_seq + block)
    if seq < 0:
        return
    m = tl.arange(0, BLOCK_M)
    tok = tl.load(block_first + block) + m // GROUP
    head = kv_head * GROUP + m % GROUP
    row_ok = (m < TOKENS * GROUP) & (tok < tl.load(cu_seqlens + seq + 1))
    pos = tl.load(positions + tok, mask=row_ok, other=-1)
    num_keys = tl.max(pos, 0) + 1
    chunk = tl.cdiv(tl.cdiv(num_keys, num_splits), BLOCK_N) * BLOCK_N
    lo = split * chunk
    hi = tl.minimum(lo + chunk, num_keys)

    dtype = q.dtype.element_ty
    d = tl.arange(0, D_PAD)
    q_ok = row_ok[:, None] & (d < D)[None, :]
    q_rows = tl.load(q + tok.to(tl.int64)[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :], mask=q_ok,
                     other=0.0)
    # AOTInductor passes Python floats as fp64 scalars: keep the online softmax in fp32
    qk_scale = tl.cast(sm_scale, tl.float32) * LOG2E
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D_PAD], tl.float32)
    table_row = block_table + seq.to(tl.int64) * stride_bt
    # each block's pages are fetched one block ahead, so the pipelined K / V loads do not wait on them
    page_next = tl.load(table_row + (lo + tl.arange(0, BLOCK_N)) // PAGE, mask=lo + tl.arange(0, BLOCK_N) < hi,
                        other=0)
    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_ok = n < hi
        page = page_next
        page_next = tl.load(table_row + (n + BLOCK_N) // PAGE, mask=n + BLOCK_N < hi, other=0)
        k = _load_rows(cache, page, 0, kv_head, n % PAGE, n_ok, num_kv_heads, dtype, D, D_PAD, PAGE, FP8)
        v = _load_rows(cache, page, 1, kv_head, n % PAGE, n_ok, num_kv_heads, dtype, D, D_PAD, PAGE, FP8)
        s = mma(q_rows, tl.trans(k), tl.zeros([BLOCK_M, BLOCK_N], tl.float32), PRECISION, UPCAST)
        s = tl.where((n[None, :] <= pos[:, None]) & n_ok[None, :], s * qk_scale, float("-inf"))
        p, alpha, m_new, l_i = online_softmax_step(s, m_i, l_i)
        acc = mma(p.to(dtype), v, acc * alpha[:, None], PRECISION, UPCAST)
        m_i = m_new

    seen = l_i > 0
    out = acc / tl.where(seen, l_i, 1.0)[:, None]
    num_heads = num_kv_heads * GROUP
    flat = tok.to(tl.int64) * num_heads + head
    if SPLIT:
        flat += split.to(tl.int64) * num_tokens * num_heads
        tl.store(o_part + flat[:, None] * D + d[None, :], out, mask=q_ok)
        lse = tl.where(seen, (m_i + tl.log2(tl.where(seen, l_i, 1.0))) * LN2, float("-inf"))
        tl.store(lse_part + flat, lse, mask=row_ok)
    else:
        tl.store(o + flat[:, None] * D + d[None, :], out.to(o.dtype.element_ty), mask=q_ok)


def _check_inputs(q: torch.Tensor, cache: torch.Tensor, block_table: torch.Tensor) -> None:
    heads, dim = q.shape[-2:]
    assert q.dtype in SUPPORTED_Q and q.stride(-1) == 1, f"q {q.dtype} {tuple(q.shape)}: bf16/fp16/fp32, unit stride"
    assert cache.is_contiguous() and head_dim_of(cache) == dim, f"cache {tuple(cache.shape)} vs head_dim {dim}"
    kv_heads = cache.shape[2]
    assert heads % kv_heads == 0, f"{heads} query heads do not group over {kv_heads} KV heads"
    assert tuple(cache.shape[1:]) == kv_cache_shape(1, kv_heads, dim, is_fp8(cache))[1:], f"bad cache {cache.shape}"
    assert block_table.dim() == 2 and block_table.stride(1) == 1, "block_table must be [N, max_pages], row-major"


def _launch(q3: torch.Tensor, cache, block_table, positions, block_seq, block_first, cu_seqlens, sm_scale: float,
            tiles: plan.TileConfig, splits: int, o: torch.Tensor, launch) -> None:
    """Attention of q3 [T, Hq, D] into o [T, Hq, D] (contiguous) over `block_seq.shape[0]` token blocks."""
    tokens, heads, dim = q3.shape
    kv_heads = cache.shape[2]
    group = heads // kv_heads
    o_part, lse_part = o, o
    if splits > 1:
        o_part = torch.empty(splits, tokens, heads, dim, dtype=torch.float32, device=q3.device)
        lse_part = torch.empty(splits, tokens, heads, dtype=torch.float32, device=q3.device)
    kernel = launch(_gqa_attention_kernel) if launch else _gqa_attention_kernel
    kernel[(block_seq.shape[0], kv_heads, splits)](
        q3, cache, block_table, positions, block_seq, block_first, cu_seqlens, o, o_part, lse_part, sm_scale, tokens,
        kv_heads, splits, q3.stride(0), q3.stride(1), block_table.stride(0),
        GROUP=group, TOKENS=tiles.tokens, BLOCK_M=tiles.rows(group), BLOCK_N=tiles.block_n, D=dim,
        D_PAD=max(16, triton.next_power_of_2(dim)), PAGE=PAGE_SIZE, FP8=is_fp8(cache), SPLIT=splits > 1,
        PRECISION="ieee" if q3.dtype == torch.float32 else "tf32", UPCAST=q3.dtype != torch.float32 and INTERPRETED,
        num_warps=tiles.num_warps, num_stages=tiles.num_stages,
    )
    if splits > 1:
        lse = torch.empty(tokens, heads, dtype=torch.float32, device=q3.device)
        combine_splits_launcher(o_part, lse_part, o, lse, launch=launch)


def gqa_prefill_launcher(q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor, cu_seqlens: torch.Tensor,
                         positions: torch.Tensor, sm_scale: float, launch=None, block_n: int | None = None,
                         num_splits: int | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """q [T, Hq, D] -> o [T, Hq, D] (into `out` when given): token t over the positions 0..positions[t] of its
    sequence. Tiles from plan.prefill_tiles; tests may shrink block_n and pick num_splits."""
    _check_inputs(q, kv_cache, block_table)
    assert q.dim() == 3 and positions.shape == (q.shape[0],), f"q {tuple(q.shape)} vs positions {positions.shape}"
    o = output_like(out, q)
    if q.shape[0] == 0:
        return o
    tiles = plan.prefill_tiles(q.shape[1] // kv_cache.shape[2], q.shape[2], q.dtype)
    if block_n is not None:
        tiles = plan.TileConfig(tiles.tokens, block_n, tiles.num_warps, tiles.num_stages)
    block_seq, block_first = dense_block_schedule(cu_seqlens, q.shape[0], tiles.tokens)
    if num_splits is None:
        num_splits = plan.num_splits(block_seq.shape[0] * kv_cache.shape[2], block_table.shape[1] * PAGE_SIZE,
                                     tiles.block_n, q.device)
    _launch(q, kv_cache, block_table, positions.contiguous(), block_seq, block_first, cu_seqlens, sm_scale, tiles,
            num_splits, o, launch)
    return o


def gqa_decode_launcher(q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor, positions: torch.Tensor,
                        sm_scale: float, launch=None, block_n: int | None = None, num_splits: int | None = None,
                        out: torch.Tensor | None = None) -> torch.Tensor:
    """q [B, L, Hq, D], positions [B, L] -> o [B, L, Hq, D] (into `out` when given): one program per (sequence, KV
    head, split) holds all L tokens of its row. Tiles from plan.decode_tiles; tests may shrink block_n and pick
    num_splits."""
    _check_inputs(q, kv_cache, block_table)
    batch, width = q.shape[:2]
    assert q.dim() == 4 and positions.shape == (batch, width), f"q {tuple(q.shape)} vs positions {positions.shape}"
    o = output_like(out, q)
    tiles = plan.decode_tiles(width, q.shape[3], q.dtype)
    if block_n is not None:
        tiles = plan.TileConfig(tiles.tokens, block_n, tiles.num_warps, tiles.num_stages)
    rows = torch.arange(batch, dtype=torch.int32, device=q.device)
    cu_seqlens = torch.arange(batch + 1, dtype=torch.int32, device=q.device) * width
    if num_splits is None:
        num_splits = plan.num_splits(batch * kv_cache.shape[2], block_table.shape[1] * PAGE_SIZE, tiles.block_n,
                                     q.device, traced=plan.TRACED_DECODE_SPLITS)
    q3 = q.flatten(0, 1)
    _launch(q3, kv_cache, block_table, positions.flatten().contiguous(), rows, rows * width, cu_seqlens, sm_scale,
            tiles, num_splits, o.view(q3.shape), launch)
    return o

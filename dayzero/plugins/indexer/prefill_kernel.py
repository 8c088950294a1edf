"""Varlen (chunked) prefill indexer with a bounded workspace.

A persistent grid of Q programs walks the query tiles (BT consecutive tokens of one sequence); for each tile it
streams the causal key range in tiles of BS keys: per head one tl.dot [BT, DI] x [DI, BS], relu, weight and sum over
heads give the [BT, BS] scores in registers, which go straight into the Top-K buffers (topk_kernel.py); at the end of
the tile every row is reduced to its Top-K and written in position order. The workspace is Q * BT buffers of CAP keys,
whatever T is: no [T, N] matrix. Tiles are dealt to programs in zigzag order (program p takes tiles p and 2Q - 1 - p
of each pair of rounds) so that long causal rows spread over the programs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dayzero.plugins import device as device_info
from dayzero.plugins.indexer.pages_kernel import key_pages
from dayzero.plugins.indexer.select_kernel import pad_row
from dayzero.plugins.indexer.tiles_kernel import dot_qk, load_keys, load_query
from dayzero.plugins.indexer.topk_kernel import buffer_layout, insert_keys, pack_keys, write_topk_row
from dayzero.plugins.paged_cache.reference import PAGE_SIZE

PREFILL_WARPS = 8


@triton.jit
def _tile_scores(q, q_scales, w, k, rows, row_ok, d, scale, HI: tl.constexpr, DI: tl.constexpr, BT: tl.constexpr,
                 BS: tl.constexpr, Q_QUANT: tl.constexpr, DOT_FP32: tl.constexpr):
    """sum_h w[t, h] * relu(q[t, h] . k[s]) * scale for BT rows and the key tile k [BS, DP] -> [BT, BS] fp32."""
    acc = tl.zeros([BT, BS], dtype=tl.float32)
    for h in range(HI):
        q_h = load_query(q, q_scales, rows, h, row_ok, d, HI, DI, Q_QUANT, DOT_FP32)
        w_h = tl.load(w + rows.to(tl.int64) * HI + h, mask=row_ok, other=0.0).to(tl.float32)
        acc += tl.maximum(dot_qk(q_h, k, DOT_FP32), 0.0) * w_h[:, None]
    return acc * tl.cast(scale, tl.float32)


@triton.jit
def _prefill_tile(q, q_scales, w, cache, block_table, positions, buf, out, row0, end, table_row, offsets, scale,
                  K, SLACK, HI: tl.constexpr, DI: tl.constexpr, PAGE: tl.constexpr, BT: tl.constexpr,
                  BS: tl.constexpr, DP: tl.constexpr, CAP: tl.constexpr, KP: tl.constexpr, KEY_QUANT: tl.constexpr,
                  Q_QUANT: tl.constexpr, DOT_FP32: tl.constexpr):
    # the buffers were read by the previous tile of this program: all of it must be done before new appends
    tl.debug_barrier()
    lane = tl.arange(0, BT)
    d = tl.arange(0, DP)
    rows = row0 + lane
    row_ok = rows < end
    pos = tl.load(positions + rows, mask=row_ok, other=-1).to(tl.int32)
    num_keys = tl.max(pos) + 1
    count = tl.zeros([BT], dtype=tl.int32)
    tau = tl.full([BT], -1, dtype=tl.int64)
    for start in range(0, num_keys, BS):
        s = start + tl.arange(0, BS)
        s_ok = s < num_keys
        k = load_keys(cache, key_pages(table_row, s, s_ok, PAGE), s, s_ok, d, DI, PAGE, KEY_QUANT, DOT_FP32)
        scores = _tile_scores(q, q_scales, w, k, rows, row_ok, d, scale, HI, DI, BT, BS, Q_QUANT, DOT_FP32)
        keys = pack_keys(scores, s[None, :], (s[None, :] <= pos[:, None]) & s_ok[None, :])
        count, tau = insert_keys(buf, offsets, keys, count, tau, K, SLACK, CAP, BT)
    for r in range(BT):
        if row0 + r < end:
            here = lane == r
            write_topk_row(buf + tl.sum(tl.where(here, offsets, 0)), tl.sum(tl.where(here, count, 0)),
                           out + (row0 + r).to(tl.int64) * K, K, KP, CAP)


@triton.jit
def _pad_rows_outside_sequences(out, cu_seqlens, num_seqs, num_tokens, pid, num_programs, K, KP: tl.constexpr):
    """Rows of tokens after the last sequence (cu_seqlens[N] < T) are all -1, as in the reference."""
    for row in range(tl.load(cu_seqlens + num_seqs) + pid, num_tokens, num_programs):
        pad_row(out + tl.cast(row, tl.int64) * K, 0, K, KP)


@triton.jit
def _prefill_kernel(
    q, q_scales, w, cache, block_table, positions, cu_seqlens, tile_seq, tile_first, buf, out, scale,
    num_seqs, num_tokens, num_tiles, table_stride, K, SLACK,
    HI: tl.constexpr, DI: tl.constexpr, PAGE: tl.constexpr, BT: tl.constexpr, BS: tl.constexpr, DP: tl.constexpr,
    CAP: tl.constexpr, KP: tl.constexpr, KEY_QUANT: tl.constexpr, Q_QUANT: tl.constexpr, DOT_FP32: tl.constexpr,
):
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    _pad_rows_outside_sequences(out, cu_seqlens, num_seqs, num_tokens, pid, num_programs, K, KP)
    offsets = (pid * BT + tl.arange(0, BT)).to(tl.int64) * CAP
    for step in range(0, tl.cdiv(num_tiles, num_programs)):
        tile = step * num_programs + tl.where(step % 2 == 0, pid, num_programs - 1 - pid)
        if tile < num_tiles:
            seq = tl.load(tile_seq + tile)
            if seq < num_seqs:
                _prefill_tile(q, q_scales, w, cache, block_table, positions, buf, out, tl.load(tile_first + tile),
                              tl.load(cu_seqlens + seq + 1), block_table + seq.to(tl.int64) * table_stride, offsets,
                              scale, K, SLACK, HI, DI, PAGE, BT, BS, DP, CAP, KP, KEY_QUANT, Q_QUANT, DOT_FP32)


def query_tiles(cu_seqlens: torch.Tensor, num_tokens: int, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiles of `rows` consecutive tokens of one sequence -> (tile_seq, tile_first) [max_tiles] int32.

    max_tiles bounds the tile count from the shapes alone; unused tiles have tile_seq = N."""
    num_seqs = cu_seqlens.shape[0] - 1
    max_tiles = min(num_tokens, (num_tokens + num_seqs * (rows - 1)) // rows)
    lens = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    tiles_per_seq = (lens + rows - 1) // rows
    tile_ends = tiles_per_seq.cumsum(0)
    tile = torch.arange(max_tiles, device=cu_seqlens.device)
    seq = torch.searchsorted(tile_ends, tile, right=True)
    clamped = seq.clamp(max=max(num_seqs - 1, 0))
    first = cu_seqlens[:-1].long()[clamped] + (tile - (tile_ends - tiles_per_seq)[clamped]) * rows
    return seq.int(), first.int()


def index_topk_prefill_launcher(
    q: torch.Tensor, w: torch.Tensor, cache: torch.Tensor, block_table: torch.Tensor, cu_seqlens: torch.Tensor,
    positions: torch.Tensor, topk: int, scale: float, q_scales: torch.Tensor | None, *, key_quant: bool,
    dot_fp32: bool, block_rows: int = 64, block_keys: int = 128, max_programs: int | None = None,
    out: torch.Tensor | None = None, page: int = PAGE_SIZE, launch=None,
) -> torch.Tensor:
    """q [T, HI, DI], w [T, HI], keys through block_table [N, max_pages] (`page` keys a page) -> indices [T, topk]
    int32 (into `out` when given). The workspace is max_programs * block_rows * CAP int64 (default: one program per
    SM); tests shrink the tile sizes so that the interpreter crosses tiles."""
    num_tokens, num_heads, dim = q.shape
    num_seqs = cu_seqlens.shape[0] - 1
    if out is None:
        out = torch.empty(num_tokens, topk, dtype=torch.int32, device=q.device)
    if num_seqs == 0:
        return out.fill_(-1)
    if num_tokens == 0:
        return out
    kp, cap, slack = buffer_layout(topk, block_keys)
    tile_seq, tile_first = query_tiles(cu_seqlens, num_tokens, block_rows)
    if max_programs is None:
        max_programs = device_info.num_sms(q.device, cpu_default=2)
    programs = torch.sym_max(1, torch.sym_min(max_programs, tile_seq.shape[0]))
    buf = torch.empty(programs * block_rows * cap, dtype=torch.int64, device=q.device)
    kernel = launch(_prefill_kernel) if launch else _prefill_kernel
    kernel[(programs,)](
        q, q if q_scales is None else q_scales, w, cache, block_table, positions, cu_seqlens, tile_seq, tile_first,
        buf, out, scale, num_seqs, num_tokens, tile_seq.shape[0], block_table.stride(0), topk, slack,
        HI=num_heads, DI=dim, PAGE=page, BT=block_rows, BS=block_keys, DP=max(16, triton.next_power_of_2(dim)),
        CAP=cap, KP=kp, KEY_QUANT=key_quant, Q_QUANT=q_scales is not None, DOT_FP32=dot_fp32, num_warps=PREFILL_WARPS)
    return out

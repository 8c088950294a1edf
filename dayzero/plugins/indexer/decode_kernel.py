"""Paged decode indexer (few query tokens per sequence, e.g. 1 + d for speculative verify): split-N + merge.

Kernel 1, grid (sequences, splits): a program scores one sequence's query rows (LP at a time, all heads in one
tl.dot [BS, DI] x [DI, LP * HP] per key tile) against one contiguous range of its cached keys, so every key tile is
read once and shared by the 1 + d tokens. It goes SC keys at a time: an innermost, software-pipelined loop writes
the head-weighted sums of SC keys to a small scratch private to the program (SC floats per row, reused), then the
whole chunk passes through the Top-K buffers (topk_kernel.py) at once, one key per thread. It leaves per row at
most K candidates, plus two floors: its K-th best key and its ceil(K / S)-th best key. Kernel 2, one program per
query row, merges the S splits' candidates in the buffer of split 0 and writes the row, skipping every
candidate below the best floor: below a split's K-th key there are K better keys in that split, below the smallest
ceil(K / S)-th key of all S splits there are at least K better keys in total. No [T, N] score matrix is ever
stored: a row's candidates are at most S * K keys.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dayzero.plugins import device as device_info
from dayzero.plugins.indexer.pages_kernel import key_pages
from dayzero.plugins.indexer.select_kernel import pad_row
from dayzero.plugins.indexer.tiles_kernel import decode_row_group, dot_kq, load_keys, sequence_span, split_chunk
from dayzero.plugins.indexer.topk_kernel import (
    append_keys,
    buffer_layout,
    insert_keys,
    pack_keys,
    row_thresholds,
    shrink_rows,
    write_topk_row,
)
from dayzero.plugins.paged_cache.reference import PAGE_SIZE
from dayzero.plugins.triton_utils import with_launch_config


@triton.jit
def _score_chunk(q_rows, w_rows, scratch_rows, rows_ok, cache, table_row, chunk, end,
                 DI: tl.constexpr, PAGE: tl.constexpr, LP: tl.constexpr, HP: tl.constexpr, DP: tl.constexpr,
                 BS: tl.constexpr, KEY_QUANT: tl.constexpr, DOT_FP32: tl.constexpr):
    """sum_h w * relu(q . k) of the keys [chunk, end) into scratch_rows[l] + (s - chunk) for the LP rows.

    The innermost loop, kept free of selection work so that Triton software-pipelines the key loads and the
    issue slots go to the scores: keys sit on the MMA rows, so the sum over heads stays within a thread quad."""
    d = tl.arange(0, DP)
    for start in range(chunk, end, BS):
        s = start + tl.arange(0, BS)
        s_ok = s < end
        k = load_keys(cache, key_pages(table_row, s, s_ok, PAGE), s, s_ok, d, DI, PAGE, KEY_QUANT, DOT_FP32)
        logits = dot_kq(k, q_rows, DOT_FP32)  # [BS, LP * HP]
        weighted = tl.reshape(tl.maximum(logits, 0.0) * w_rows[None, :], (BS, LP, HP))
        sums = tl.sum(weighted, axis=2)  # [BS, LP]
        tl.store(scratch_rows[None, :] + (s - chunk)[:, None], sums, mask=s_ok[:, None] & rows_ok[None, :])


@triton.jit
def _select_chunk(scratch_rows, pos, buf, offsets, count, tau, chunk, end, scale, K,
                  LP: tl.constexpr, SC: tl.constexpr, CAP: tl.constexpr):
    """The keys [chunk, end) of the scratch through the LP Top-K buffers -> (count, tau) [LP]."""
    # room for SC more keys per row: a full row keeps between K and CAP - SC of its best
    full = count > CAP - SC
    if tl.max(full.to(tl.int32)) > 0:
        count, tau = shrink_rows(buf, offsets, count, tau, full, K, CAP - SC - K, CAP, LP)
    # the scores written by every thread of this program must be visible
    tl.debug_barrier()
    s = chunk + tl.arange(0, SC)
    in_chunk = s < end
    sums = tl.load(scratch_rows[:, None] + (s - chunk)[None, :], mask=in_chunk[None, :] & (pos >= 0)[:, None],
                   other=0.0, cache_modifier=".cg")
    # AOTInductor passes Python floats as fp64 scalars: the packed keys need fp32 scores
    keys = pack_keys(sums * tl.cast(scale, tl.float32), s[None, :], in_chunk[None, :] & (s[None, :] <= pos[:, None]))
    count = append_keys(buf, offsets, keys, count, tau)
    # every thread has read the scratch before the next chunk overwrites it
    tl.debug_barrier()
    return count, tau


@triton.jit
def _split_select(q_rows, w_rows, pos, slots, cache, table_row, buf, scratch, lo, hi, scale, K, K_SPLIT,
                  DI: tl.constexpr, PAGE: tl.constexpr, LP: tl.constexpr, HP: tl.constexpr, DP: tl.constexpr,
                  BS: tl.constexpr, SC: tl.constexpr, CAP: tl.constexpr, KEY_QUANT: tl.constexpr,
                  DOT_FP32: tl.constexpr):
    """Stream keys [lo, hi) through the buffers of LP rows, SC keys at a time -> (count, K-th key, K_SPLIT-th key)
    [LP], at most K kept per row (-1: fewer keys than that)."""
    offsets = slots * CAP
    scratch_rows = scratch + slots * SC
    count = tl.zeros([LP], dtype=tl.int32)
    tau = tl.full([LP], -1, dtype=tl.int64)
    for chunk in range(lo, hi, SC):
        end = tl.minimum(chunk + SC, hi)
        # rows past the sequence (pos -1) have no scratch
        _score_chunk(q_rows, w_rows, scratch_rows, pos >= 0, cache, table_row, chunk, end, DI, PAGE, LP, HP, DP, BS,
                     KEY_QUANT, DOT_FP32)
        count, tau = _select_chunk(scratch_rows, pos, buf, offsets, count, tau, chunk, end, scale, K, LP, SC, CAP)
    # an exact final shrink: K keys >= the threshold, so the sequence's K-th best is at least that threshold
    count, kth = shrink_rows(buf, offsets, count, tl.full([LP], -1, dtype=tl.int64), count > K, K, 0, CAP, LP)
    return count, kth, row_thresholds(buf, offsets, count, K_SPLIT, CAP, LP)


@triton.jit
def _decode_split_kernel(
    q, q_scales, w, cache, block_table, positions, cu_seqlens, buf, scratch, counts, floors, scale,
    num_splits, min_chunk, table_stride, K, K_SPLIT,
    HI: tl.constexpr, DI: tl.constexpr, PAGE: tl.constexpr, LP: tl.constexpr, HP: tl.constexpr, DP: tl.constexpr,
    BS: tl.constexpr, SC: tl.constexpr, CAP: tl.constexpr, KEY_QUANT: tl.constexpr, Q_QUANT: tl.constexpr,
    DOT_FP32: tl.constexpr,
):
    seq = tl.program_id(0)
    split = tl.program_id(1)
    first, end, table_row = sequence_span(cu_seqlens, block_table, table_stride, seq)
    for row0 in range(first, end, LP):
        rows, row_ok, pos, q_rows, w_rows = decode_row_group(q, q_scales, w, positions, row0, end, HI, DI, LP, HP, DP,
                                                             Q_QUANT, DOT_FP32)
        num_keys, chunk = split_chunk(pos, num_splits, min_chunk, BS)
        lo = split * chunk
        hi = tl.minimum(lo + chunk, num_keys)
        slots = rows.to(tl.int64) * num_splits + split
        count, kth, quantile = _split_select(q_rows, w_rows, pos, slots, cache, table_row, buf, scratch, lo, hi,
                                             scale, K, K_SPLIT, DI, PAGE, LP, HP, DP, BS, SC, CAP, KEY_QUANT,
                                             DOT_FP32)
        tl.store(counts + slots, count, mask=row_ok)
        tl.store(floors + 2 * slots, kth, mask=row_ok)
        tl.store(floors + 2 * slots + 1, quantile, mask=row_ok)


@triton.jit
def _merge_floor(floors, first, num_splits):
    """The largest key below which no candidate of the row can be in its Top-K (-1: none known)."""
    kth = tl.load(floors + 2 * first)
    quantile = tl.load(floors + 2 * first + 1)
    for j in range(1, num_splits):
        kth = tl.maximum(kth, tl.load(floors + 2 * (first + j)))
        quantile = tl.minimum(quantile, tl.load(floors + 2 * (first + j) + 1))
    return tl.maximum(kth, quantile)


@triton.jit
def _merge_kernel(buf, counts, floors, out, cu_seqlens, num_seqs, num_splits, topk, SLACK,
                  CAP: tl.constexpr, KP: tl.constexpr, CM: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    out_row = out + row * topk
    if row >= tl.load(cu_seqlens + num_seqs):
        pad_row(out_row, 0, topk, KP)
        return
    first = row * num_splits
    # candidates must be >= the floor, i.e. > tau; the ones of split 0 stay where they are, unfiltered
    tau = tl.full([1], 0, dtype=tl.int64) + tl.maximum(_merge_floor(floors, first, num_splits) - 1, -1)
    count = tl.full([1], 0, dtype=tl.int32) + tl.load(counts + first)
    offsets = tl.full([1], 0, dtype=tl.int64) + first * CAP
    for j in range(1, num_splits):
        n = tl.load(counts + first + j)
        src = buf + (first + j) * CAP
        for c0 in range(0, n, CM):
            offs = c0 + tl.arange(0, CM)
            keys = tl.load(src + offs, mask=offs < n, other=-1)
            count, tau = insert_keys(buf, offsets, keys[None, :], count, tau, topk, SLACK, CAP, 1)
    write_topk_row(buf + first * CAP, tl.sum(count, axis=0), out_row, topk, KP, CAP)


def decode_row_tiles(rows_per_program: int, num_heads: int, block_keys: int,
                     maxnreg: int | None | str) -> tuple[int, int, int | None]:
    """(LP, HP, maxnreg) of a decode split kernel: LP query rows of HP (padded) heads share a key tile, at least 16
    dot rows; maxnreg "auto" caps one row's program with a logits tile of at most 64 x 64 at 128 registers (two 8-warp
    programs per SM; its key loop does not spill under it in the sm_90 SASS, ptxas otherwise takes ~170)."""
    hp = triton.next_power_of_2(num_heads)
    lp = max(rows_per_program, triton.cdiv(16, hp))  # tl.dot needs at least 16 rows
    if maxnreg == "auto":
        maxnreg = 128 if lp == 1 and hp * block_keys <= 64 * 64 else None
    return lp, hp, maxnreg


# logits a 4-warp program's fp32 dot holds at once: ptxas keeps 32 x 32 in registers, 64 x 32 in a 4.9 KB stack a
# thread (sm_90, Triton 3.6; spilled 14 KB a tile), local memory a launch reserves for every resident thread
FP32_DOT_LOGITS = 1024


def fp32_dot_block_keys(dot_rows: int) -> int:
    """Keys a tile of the fp32 (FMA) dot with `dot_rows` query-head rows: its logits kept to FP32_DOT_LOGITS, 16 to
    64 keys (the fp32 dot is the exact path for an fp32 cache, not a fast one)."""
    return max(16, min(64, FP32_DOT_LOGITS // dot_rows))


def decode_num_splits(num_seqs: int, max_keys: int, min_chunk: int, device: torch.device) -> int:
    """Splits per sequence: enough programs for two waves over the SMs, each split at least min_chunk keys."""
    sms = device_info.num_sms(device, cpu_default=2)
    by_sms = triton.cdiv(2 * sms, torch.sym_max(num_seqs, 1))
    return torch.sym_max(1, torch.sym_min(by_sms, triton.cdiv(max_keys, min_chunk)))


def index_topk_decode_launcher(
    q: torch.Tensor, w: torch.Tensor, cache: torch.Tensor, block_table: torch.Tensor, cu_seqlens: torch.Tensor,
    positions: torch.Tensor, topk: int, scale: float, q_scales: torch.Tensor | None, *, key_quant: bool,
    dot_fp32: bool, rows_per_program: int, num_splits: int | None = None, min_chunk: int | None = None,
    block_keys: int = 64, super_chunk: int = 1024, merge_chunk: int = 1024, num_warps: int = 8,
    maxnreg: int | None | str = "auto", out: torch.Tensor | None = None, launch=None,
) -> torch.Tensor:
    """q [T, HI, DI], w [T, HI], keys through block_table [N, max_pages] -> indices [T, topk] int32 (into `out`
    when given).

    rows_per_program: query rows sharing each key tile (power of two, >= the tokens of a sequence for one pass);
    super_chunk: keys appended between two shrinks of a buffer (a multiple of block_keys); maxnreg: the register
    cap of the split kernel (see decode_row_tiles)."""
    assert super_chunk % block_keys == 0, "super_chunk must be a multiple of block_keys"
    num_tokens, num_heads, dim = q.shape
    num_seqs = cu_seqlens.shape[0] - 1
    lp, hp, maxnreg = decode_row_tiles(rows_per_program, num_heads, block_keys, maxnreg)
    kp = max(16, triton.next_power_of_2(topk))
    merge_chunk = min(merge_chunk, kp)
    kp, cap, _ = buffer_layout(topk, max(super_chunk, merge_chunk))
    min_chunk = kp if min_chunk is None else min_chunk
    if num_splits is None:
        num_splits = decode_num_splits(num_seqs, block_table.shape[1] * PAGE_SIZE, min_chunk, q.device)
    buf = torch.empty(num_tokens * num_splits * cap, dtype=torch.int64, device=q.device)
    scratch = torch.empty(num_tokens * num_splits * super_chunk, dtype=torch.float32, device=q.device)
    counts = torch.empty(num_tokens * num_splits, dtype=torch.int32, device=q.device)
    floors = torch.empty(2 * num_tokens * num_splits, dtype=torch.int64, device=q.device)
    if out is None:
        out = torch.empty(num_tokens, topk, dtype=torch.int32, device=q.device)
    if num_tokens == 0:
        return out
    split_kernel = with_launch_config(_decode_split_kernel, num_warps, maxnreg)
    split_kernel = launch(split_kernel) if launch else split_kernel
    merge_kernel = launch(_merge_kernel) if launch else _merge_kernel
    if num_seqs > 0:
        split_kernel[(num_seqs, num_splits)](
            q, q if q_scales is None else q_scales, w, cache, block_table, positions, cu_seqlens, buf, scratch, counts,
            floors, scale, num_splits, min_chunk, block_table.stride(0), topk, triton.cdiv(topk, num_splits),
            HI=num_heads, DI=dim, PAGE=PAGE_SIZE, LP=lp, HP=hp, DP=max(16, triton.next_power_of_2(dim)),
            BS=block_keys, SC=super_chunk, CAP=cap, KEY_QUANT=key_quant, Q_QUANT=q_scales is not None,
            DOT_FP32=dot_fp32)
    merge_kernel[(num_tokens,)](buf, counts, floors, out, cu_seqlens, num_seqs, num_splits, topk,
                                cap - merge_chunk - topk, CAP=cap, KP=kp, CM=merge_chunk, num_warps=num_warps)
    return out

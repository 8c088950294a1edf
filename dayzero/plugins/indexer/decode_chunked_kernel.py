"""Paged decode indexer in rounds: a bounded chunk of the context is scored by one kernel, folded into Top-K sets
by another.

The split kernel of decode_select_kernel.py scores and selects in one program. Its selection holds a union of set +
block keys in registers (about 30K registers a program at K = 2048, bench/README.md), so two programs fit an SM and
each one's key stream stops at every selection. Here each round of CHUNK key positions takes two launches:

1. score, grid (sequences, CHUNK / RANGE): a program scores RANGE keys of its sequence for the sequence's query rows
   (LP at a time, one tl.dot per key tile) into a workspace [T, CHUNK] of score keys (decode_select_kernel's
   `_score_block`; 0 where not visible). It holds no selection state (96 registers at HI 32 on sm_90, offline).
2. fold, grid (rows, S): program (row, split) folds its part of the chunk (CHUNK / S positions) into its set,
   reading the workspace, which is small enough to stay in the L2 (64 rows x 16K keys x 4 B = 4 MB): keys above the
   set's K-th key go to a buffer of candidates, which is folded into the set (`keep_best`) when it would overflow.

Memory is bounded by CHUNK, never a [T, N] score matrix. A split's keys come in position order across rounds, so
each set is the Top-K of its split's keys, ties to the earlier position. The last round publishes each set's
floors; the merge kernel of decode_select_kernel.py folds a row's S sets.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dayzero.plugins import device as device_info
from dayzero.plugins.indexer.candidates_kernel import filter_block, filter_block_size, fold_candidates
from dayzero.plugins.indexer.decode_kernel import decode_row_tiles, fp32_dot_block_keys
from dayzero.plugins.indexer.decode_select_kernel import _merge_select_kernel, _score_block, merge_sets_of
from dayzero.plugins.indexer.fp8_dot_kernel import mxfp8_dot_applies
from dayzero.plugins.indexer.pages_kernel import block_page_count
from dayzero.plugins.indexer.select_kernel import kth_key, union_layout
from dayzero.plugins.indexer.tiles_kernel import decode_row_group, sequence_span
from dayzero.plugins.paged_cache.reference import PAGE_SIZE


@triton.jit
def _score_chunk_kernel(
    q, q_scales, w, cache, block_table, positions, cu_seqlens, scores, scale, chunk_start, table_stride,
    HI: tl.constexpr, DI: tl.constexpr, PAGE: tl.constexpr, LP: tl.constexpr, HP: tl.constexpr, DP: tl.constexpr,
    BS: tl.constexpr, CHUNK: tl.constexpr, RANGE: tl.constexpr, KEY_QUANT: tl.constexpr, Q_QUANT: tl.constexpr,
    DOT_FP32: tl.constexpr, KEY_WORDS: tl.constexpr, CODE_WORDS: tl.constexpr, FP8_DOT: tl.constexpr,
    NPB: tl.constexpr,
):
    seq = tl.program_id(0)
    lo = chunk_start + tl.program_id(1) * RANGE
    first, end, table_row = sequence_span(cu_seqlens, block_table, table_stride, seq)
    for row0 in range(first, end, LP):
        rows, row_ok, pos, q_rows, w_rows = decode_row_group(q, q_scales, w, positions, row0, end, HI, DI, LP, HP, DP,
                                                             Q_QUANT, DOT_FP32, FP8_DOT)
        hi = tl.minimum(lo + RANGE, tl.max(pos) + 1)
        # each row's scores of [lo, hi) at its workspace row, offset by the chunk's start
        row_scores = scores + rows.to(tl.int64) * CHUNK + (lo - chunk_start)
        _score_block(q_rows, w_rows, row_scores, pos, row_ok & (pos >= 0), cache, table_row, lo, hi, scale, DI, PAGE,
                     LP, HP, DP, BS, KEY_QUANT, DOT_FP32, KEY_WORDS, CODE_WORDS, FP8_DOT, NPB)


@triton.jit
def _fold_chunk_kernel(
    scores, positions, set_keys, set_positions, pending_keys, pending_positions, counts, taus, pendings, floors,
    num_splits_used, chunk_start, num_splits, K,
    CHUNK: tl.constexpr, PART: tl.constexpr, KP: tl.constexpr, U: tl.constexpr, BLOCK: tl.constexpr,
    FIRST: tl.constexpr, LAST: tl.constexpr,
):
    """Program (row, split): the split's positions of this round's chunk into its set, BLOCK keys at a time through
    a buffer of candidates (candidates_kernel.py); the buffer is folded in at the last round."""
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    which = row * num_splits + split
    base_keys = set_keys + which * KP
    base_positions = set_positions + which * KP
    cand_keys = pending_keys + which * (U - KP)
    cand_positions = pending_positions + which * (U - KP)
    limit = tl.load(positions + row).to(tl.int32) + 1
    if FIRST:
        count = tl.zeros([], tl.int32)
        tau = tl.zeros([], tl.uint32)
        pending = tl.zeros([], tl.int32)
    else:
        count = tl.load(counts + which)
        tau = tl.load(taus + which).to(tl.uint32, bitcast=True)
        pending = tl.load(pendings + which)
    lo = chunk_start + split * PART
    hi = tl.minimum(lo + PART, limit)
    for block in range(lo, hi, BLOCK):
        count, tau, pending = filter_block(scores + row * CHUNK + (block - chunk_start), hi - block, block, base_keys,
                                           base_positions, cand_keys, cand_positions, count, tau, pending, K, KP, U,
                                           BLOCK)
    if LAST:
        if pending > 0:
            count, tau = fold_candidates(base_keys, base_positions, cand_keys, cand_positions, count, tau, pending, K,
                                         KP, U)
        # the splits that hold keys of this row; enough keys above each of the first used - 1 quantiles make K
        used = tl.minimum(num_splits, tl.cdiv(limit, PART))
        k_quantile = tl.cdiv(K, tl.maximum(used - 1, 1))
        quantile = tl.zeros([], tl.uint32)
        if count >= k_quantile:
            offs = tl.arange(0, KP)
            tl.debug_barrier()
            keys = tl.load(base_keys + offs, mask=offs < count, other=0, cache_modifier=".cg")
            quantile = kth_key(keys.to(tl.uint32, bitcast=True), k_quantile, 0)
        tl.store(counts + which, count)
        tl.store(floors + 2 * which, tl.where(count >= K, tau, 0).to(tl.int32, bitcast=True))
        tl.store(floors + 2 * which + 1, quantile.to(tl.int32, bitcast=True))
        if split == 0:
            tl.store(num_splits_used + row, used)
    else:
        tl.store(counts + which, count)
        tl.store(taus + which, tau.to(tl.int32, bitcast=True))
        tl.store(pendings + which, pending)


def chunked_num_splits(num_tokens: int, part_unit: int, chunk_keys: int, device: torch.device) -> int:
    """Splits per row: fold programs for about two per SM, each split's part at least one union block; a power of
    two, so that it divides a power-of-two chunk."""
    sms = device_info.num_sms(device, cpu_default=2)
    splits = max(1, min(triton.cdiv(2 * sms, max(num_tokens, 1)), chunk_keys // part_unit))
    return 1 << (splits.bit_length() - 1)


def index_topk_decode_chunked_launcher(
    q: torch.Tensor, w: torch.Tensor, cache: torch.Tensor, block_table: torch.Tensor, cu_seqlens: torch.Tensor,
    positions: torch.Tensor, topk: int, scale: float, q_scales: torch.Tensor | None, *, key_quant: bool,
    dot_fp32: bool, rows_per_program: int, num_splits: int | None = None, chunk_keys: int = 16384,
    range_keys: int = 1024, block_keys: int | None = None, union_keys: int = 4096, num_warps: int = 4,
    fold_warps: int = 8, merge_warps: int = 8, key_words: bool | None = None, code_words: bool | None = None,
    fp8_dot: bool | None = None, merge_sets: int | None = None, out: torch.Tensor | None = None, launch=None,
) -> torch.Tensor:
    """q [T, HI, DI], w [T, HI], keys through block_table [N, max_pages] -> indices [T, topk] int32 (into `out`
    when given), in rounds of `chunk_keys` positions (a multiple of range_keys, itself a multiple of block_keys):
    score programs of `range_keys` keys, fold programs of chunk_keys / num_splits positions per row. block_keys: keys
    a tile (None: fp32_dot_block_keys on the fp32 dot without the FP8 dot, else 64).

    The rounds are a host loop over the block table's width: eager calls only (an exported engine's width is a
    symbol). key_words / code_words / fp8_dot / merge_sets as in decode_select_kernel's launcher."""
    num_tokens, num_heads, dim = q.shape
    if any(isinstance(n, torch.SymInt) for n in (num_tokens, block_table.shape[1])):
        raise ValueError("the chunked decode indexer loops over rounds on the host and runs eagerly only; export "
                         "engines with decode_kernel='select'")
    lp, hp, _ = decode_row_tiles(rows_per_program, num_heads, 0, None)
    fp8_dot = mxfp8_dot_applies(key_quant, q_scales, fp8_dot, lp * hp)
    if block_keys is None:
        block_keys = fp32_dot_block_keys(lp * hp) if dot_fp32 and not fp8_dot else 64
    assert chunk_keys % range_keys == 0 and range_keys % block_keys == 0, (
        f"chunk_keys {chunk_keys} must be a multiple of range_keys {range_keys}, itself one of block_keys {block_keys}")
    if key_words is None:
        key_words = key_quant and dim % 128 == 0
    if code_words is None:
        code_words = key_words
    num_seqs = cu_seqlens.shape[0] - 1
    kp, union = union_layout(topk, union_keys, block_keys)
    if num_splits is None:
        num_splits = chunked_num_splits(num_tokens, union - kp, chunk_keys, q.device)
    assert chunk_keys % num_splits == 0, f"chunk_keys {chunk_keys} must split evenly into {num_splits} parts"
    if out is None:
        out = torch.empty(num_tokens, topk, dtype=torch.int32, device=q.device)
    if num_tokens == 0:
        return out
    num_sets = num_tokens * num_splits
    scores = torch.empty(num_tokens * chunk_keys, dtype=torch.int32, device=q.device)
    set_keys = torch.empty(num_sets * kp, dtype=torch.int32, device=q.device)
    set_positions = torch.empty(num_sets * kp, dtype=torch.int32, device=q.device)
    pending_keys = torch.empty(num_sets * (union - kp), dtype=torch.int32, device=q.device)
    pending_positions = torch.empty(num_sets * (union - kp), dtype=torch.int32, device=q.device)
    counts = torch.empty(num_sets, dtype=torch.int32, device=q.device)
    taus = torch.empty(num_sets, dtype=torch.int32, device=q.device)
    pendings = torch.empty(num_sets, dtype=torch.int32, device=q.device)
    floors = torch.empty(2 * num_sets, dtype=torch.int32, device=q.device)
    used = torch.empty(num_tokens, dtype=torch.int32, device=q.device)
    score_kernel = launch(_score_chunk_kernel) if launch else _score_chunk_kernel
    fold_kernel = launch(_fold_chunk_kernel) if launch else _fold_chunk_kernel
    merge_kernel = launch(_merge_select_kernel) if launch else _merge_select_kernel
    rounds = max(1, triton.cdiv(block_table.shape[1] * PAGE_SIZE, chunk_keys))
    for r in range(rounds):
        start = r * chunk_keys
        if num_seqs > 0:
            score_kernel[(num_seqs, chunk_keys // range_keys)](
                q, q if q_scales is None else q_scales, w, cache, block_table, positions, cu_seqlens, scores, scale,
                start, block_table.stride(0), HI=num_heads, DI=dim, PAGE=PAGE_SIZE, LP=lp, HP=hp,
                DP=max(16, triton.next_power_of_2(dim)), BS=block_keys, CHUNK=chunk_keys, RANGE=range_keys,
                KEY_QUANT=key_quant, Q_QUANT=q_scales is not None, DOT_FP32=dot_fp32, KEY_WORDS=key_words,
                CODE_WORDS=code_words, FP8_DOT=fp8_dot, NPB=block_page_count(range_keys, PAGE_SIZE, block_keys),
                num_warps=num_warps)
        fold_kernel[(num_tokens, num_splits)](
            scores, positions, set_keys, set_positions, pending_keys, pending_positions, counts, taus, pendings, floors,
            used, start, num_splits, topk,
            CHUNK=chunk_keys, PART=chunk_keys // num_splits, KP=kp, U=union, BLOCK=filter_block_size(kp, union),
            FIRST=r == 0, LAST=r == rounds - 1,
            num_warps=fold_warps)
    # the merge reads set j at set_keys + j * U: the sets here are KP apart; a row's splits interleave in position
    merge_kernel[(num_tokens,)](set_keys, set_positions, counts, floors, used, out, cu_seqlens, num_seqs, num_splits,
                                topk, 1, KP=kp, U=kp, SETS=merge_sets_of(kp, merge_sets), ANY_ORDER=True, LAST=True,
                                num_warps=merge_warps)
    return out

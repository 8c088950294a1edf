"""Paged decode indexer with register-resident Top-K sets (select_kernel.py): split-N + merge.

Kernel 1, grid (sequences, splits): a program scores one sequence's query rows (LP at a time, all heads in one
tl.dot per key tile, so every key tile is read once for the 1 + d tokens) over one contiguous range of its keys,
L = U - KP keys at a time. The scores of a block go, as 32-bit order keys, into a scratch right behind each row's
set (program-private, reused); then each row keeps the K best of set + block (`keep_best`: one bitwise search, one
scan, no sort). At the end a row's set is its split's candidates (at most K, position order), published with two
floors: the set's K-th key and its ceil(K / (S - 1))-th key.

Kernel 2 folds the splits' sets with the same `keep_best`, several sets a step (MERGE_UNION entries: one search per
step, whatever its size), in a tree of launches (`merge_strides`: a program folds up to SETS splits into the first,
level after level, until a row's leaders fit one program, which writes the output). Every step drops each candidate
below the best floor (below a split's K-th key there are K better keys in that split; below the smallest
ceil(K / (S - 1))-th key of the first S - 1 splits there are at least K better keys in total), so that the merge
mostly appends and searches once or twice; the final K are already in position order, the output order
(reference.py), so no sort follows. Memory: one set + block per program and row, never a [T, N] score matrix.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dayzero.plugins import device as device_info
from dayzero.plugins.indexer.fp8_dot_kernel import FP8_DOT_BLOCK_KEYS, key_scale_words, mxfp8_dot_applies, mxfp8_logits
from dayzero.plugins.indexer.pages_kernel import block_page_count, block_pages, tile_pages
from dayzero.plugins.indexer.select_kernel import (
    MAX_UNION,
    keep_best,
    kth_key,
    load_set,
    pad_row,
    score_keys,
    union_layout,
    write_positions,
)
from dayzero.plugins.indexer.tiles_kernel import decode_row_group, dot_kq, load_keys, sequence_span, split_chunk
from dayzero.plugins.indexer.words_tiles_kernel import load_keys_words
from dayzero.plugins.paged_cache.reference import PAGE_SIZE

# splits whose floors the merge reads at once
FLOOR_BLOCK = tl.constexpr(32)
# A row takes a split per next_pow2(topk) keys (min_chunk), up to MAX_SPLITS and as many as fit one wave of two
# programs an SM (select_num_splits): at B64, 4 splits at any context; at B1, 4 at 8K, 16 at 32K, 64 at 128K. The
# tree merge folds 64 splits in three dependent steps as it does 32, so the shorter splits pay at B1-B4 and 128K keys
# (on an H100 0.071-0.096 ms against 0.103-0.114 with 32 splits; bench/bench_indexer.py).
MAX_SPLITS = 64
# entries a merge step searches at once: 32 a thread on the merge's 8 warps. Each step costs one bitwise search of
# the union's K-th key whatever its size, so four sets of 2048 fold in one step, not three.
MERGE_UNION = 8192
# The split kernel runs on 4 warps without a register cap, key tiles 3 stages deep (deeper stages gain nothing at HI
# 64, and two programs must fit an SM's shared memory); 8 warps capped at 128 registers take 7-13% more GPU time.
# The merge runs on 8 warps (4 and 16 are slower). bench/bench_indexer.py measures them.
SPLIT_WARPS = 4
SPLIT_STAGES = 3
MERGE_WARPS = 8
# logits a 4-warp program's fp32 dot holds at once: ptxas keeps 32 x 32 in registers, 64 x 32 in a 4.9 KB stack a
# thread (sm_90, Triton 3.6), local memory a launch reserves for every resident thread
FP32_DOT_LOGITS = 1024


@triton.jit
def _store_scores(logits, w_rows, block_rows, pos, rows_ok, block, start, end, scale, BS: tl.constexpr,
                  LP: tl.constexpr, HP: tl.constexpr):
    """A tile's logits [BS, LP * HP] -> the LP rows' score keys of keys [start, start + BS) at block_rows[l] +
    (s - block) (0: not visible)."""
    s = start + tl.arange(0, BS)
    weighted = tl.reshape(tl.maximum(logits, 0.0) * w_rows[None, :], (BS, LP, HP))
    # AOTInductor passes Python floats as fp64 scalars: the keys need fp32 scores
    scores = tl.sum(weighted, axis=2) * tl.cast(scale, tl.float32)  # [BS, LP]
    keys = score_keys(scores, s[:, None] <= pos[None, :])
    tl.store(block_rows[None, :] + (s - block)[:, None], keys.to(tl.int32, bitcast=True),
             mask=(s < end)[:, None] & rows_ok[None, :])


@triton.jit
def _score_block(q_rows, w_rows, block_rows, pos, rows_ok, cache, table_row, block, end, scale,
                 DI: tl.constexpr, PAGE: tl.constexpr, LP: tl.constexpr, HP: tl.constexpr, DP: tl.constexpr,
                 BS: tl.constexpr, KEY_QUANT: tl.constexpr, DOT_FP32: tl.constexpr, KEY_WORDS: tl.constexpr,
                 FP8_DOT: tl.constexpr, NPB: tl.constexpr):
    """Score keys of the keys [block, end) into block_rows[l] + (s - block) for the LP rows (0: not visible).

    The innermost loop, free of selection work so that Triton software-pipelines the key loads: keys sit on the
    MMA rows, so the sum over heads stays within a thread quad. KEY_WORDS: MXFP8 keys with their codes and scales
    loaded as int32 words (words_tiles_kernel.py), the same keys. FP8_DOT: MXFP8 keys and
    query (q_rows its blocks) on the FP8 tensor cores (fp8_dot_kernel.py). Every path reads the block's pages once (NPB
    of them, pages_kernel.py), so that its key loads are pipelined."""
    pages = block_pages(table_row, block, end, PAGE, NPB)
    if FP8_DOT:
        # the scale words of the first tile (DI = 128: a word a key; other widths read their scales as bytes)
        words = tl.zeros([BS], tl.int32)
        if DI == 128:
            words = key_scale_words(cache, pages, block, block, end, DI, PAGE, BS)
        # up to 32 dot rows, two tiles an iteration: the next tile's scale words then land in a register of their
        # own (with one tile, the loop-carried copy of the prefetched words waits for their load mid-tile: 7% of the
        # split kernel's stall samples in ncu at 128K keys, HI 32; 611 against 638 us). At 64 rows the unrolled loop
        # spills (336 B in the sm_90 build) and is slower: 865 against 798 us.
        UNROLL: tl.constexpr = 2 if LP * HP <= 32 else 1
        for start in tl.range(block, end, BS, loop_unroll_factor=UNROLL):
            logits, words = mxfp8_logits(cache, pages, block, start, end, q_rows, words, DI, PAGE, BS, DOT_FP32)
            _store_scores(logits, w_rows, block_rows, pos, rows_ok, block, start, end, scale, BS, LP, HP)
    else:
        d = tl.arange(0, DP)
        for start in range(block, end, BS):
            s = start + tl.arange(0, BS)
            s_ok = s < end
            page = tile_pages(pages, block, start, PAGE, BS)
            if KEY_WORDS:
                k = load_keys_words(cache, page, s, s_ok, DI, PAGE, DP, DOT_FP32)
            else:
                k = load_keys(cache, page, s, s_ok, d, DI, PAGE, KEY_QUANT, DOT_FP32)
            _store_scores(dot_kq(k, q_rows, DOT_FP32), w_rows, block_rows, pos, rows_ok, block, start, end, scale,
                          BS, LP, HP)


@triton.jit
def _keep_block(set_keys, set_positions, count, lower, block, end, K, KP: tl.constexpr, U: tl.constexpr):
    """One row: its set (count entries) + the block's score keys [block, end) at set_keys[KP:] -> (count, t)."""
    lane = tl.arange(0, U)
    in_set = lane < KP
    ok = tl.where(in_set, lane < count, block + lane - KP < end)
    # the block's keys were stored by other threads
    tl.debug_barrier()
    keys = tl.load(set_keys + lane, mask=ok, other=0, cache_modifier=".cg").to(tl.uint32, bitcast=True)
    positions = tl.load(set_positions + lane, mask=ok & in_set, other=0, cache_modifier=".cg")
    positions = tl.where(in_set, positions, block + lane - KP)
    return keep_best(keys, positions, set_keys, set_positions, K, lower)


@triton.jit
def _select_range(q_rows, w_rows, pos, sets, cache, table_row, set_keys, set_positions, lo, hi, scale, K,
                  DI: tl.constexpr, PAGE: tl.constexpr, LP: tl.constexpr, HP: tl.constexpr, DP: tl.constexpr,
                  BS: tl.constexpr, KP: tl.constexpr, U: tl.constexpr, KEY_QUANT: tl.constexpr,
                  DOT_FP32: tl.constexpr, KEY_WORDS: tl.constexpr, FP8_DOT: tl.constexpr, NPB: tl.constexpr):
    """Stream the keys [lo, hi) through the sets of LP rows -> (count, t) [LP]: t a key with K set entries >= it
    (0: fewer than K entries). Each block of U - KP keys is scored behind the set and folded into it (keep_best: a
    search a block)."""
    BLOCK: tl.constexpr = U - KP
    lane = tl.arange(0, LP)
    rows_ok = pos >= 0
    count = tl.zeros([LP], dtype=tl.int32)
    tau = tl.zeros([LP], dtype=tl.uint32)
    for block in range(lo, hi, BLOCK):
        end = tl.minimum(block + BLOCK, hi)
        _score_block(q_rows, w_rows, set_keys + sets * U + KP, pos, rows_ok, cache, table_row, block, end, scale, DI,
                     PAGE, LP, HP, DP, BS, KEY_QUANT, DOT_FP32, KEY_WORDS, FP8_DOT, NPB)
        for r in range(LP):
            here = lane == r
            if tl.sum((here & rows_ok).to(tl.int32)) > 0:
                n = tl.sum(tl.where(here, count, 0))
                set_index = tl.sum(tl.where(here, sets, 0))
                lower = tl.max(tl.where(here & (count >= K), tau, 0))
                n, t = _keep_block(set_keys + set_index * U, set_positions + set_index * KP, n, lower, block, end,
                                   K, KP, U)
                count = tl.where(here, n, count)
                tau = tl.where(here, t, tau)
        # every row's selection has read the block before the next one overwrites it
        tl.debug_barrier()
    return count, tau


@triton.jit
def _quantiles(set_keys, sets, count, k_quantile, LP: tl.constexpr, KP: tl.constexpr, U: tl.constexpr):
    """Per row, a key with k_quantile of its set's entries >= it; 0 where the set is smaller -> uint32 [LP]."""
    lane = tl.arange(0, LP)
    offs = tl.arange(0, KP)
    quantiles = tl.zeros([LP], dtype=tl.uint32)
    tl.debug_barrier()
    for r in range(LP):
        here = lane == r
        n = tl.sum(tl.where(here, count, 0))
        if n >= k_quantile:
            row = set_keys + tl.sum(tl.where(here, sets, 0)) * U
            keys = tl.load(row + offs, mask=offs < n, other=0, cache_modifier=".cg").to(tl.uint32, bitcast=True)
            quantiles = tl.where(here, kth_key(keys, k_quantile, 0), quantiles)
    return quantiles


@triton.jit
def _row_splits(pos, num_splits, split_keys):
    """The splits the rows' sequence uses: one per split_keys keys, at most num_splits."""
    return tl.minimum(num_splits, tl.cdiv(tl.max(pos) + 1, split_keys))


@triton.jit
def _decode_select_kernel(
    q, q_scales, w, cache, block_table, positions, cu_seqlens, set_keys, set_positions, counts, floors,
    num_splits_used, scale, num_splits, min_chunk, split_keys, table_stride, K,
    HI: tl.constexpr, DI: tl.constexpr, PAGE: tl.constexpr, LP: tl.constexpr, HP: tl.constexpr, DP: tl.constexpr,
    BS: tl.constexpr, KP: tl.constexpr, U: tl.constexpr, KEY_QUANT: tl.constexpr, Q_QUANT: tl.constexpr,
    DOT_FP32: tl.constexpr, KEY_WORDS: tl.constexpr, FP8_DOT: tl.constexpr, NPB: tl.constexpr,
):
    seq = tl.program_id(0)
    split = tl.program_id(1)
    first, end, table_row = sequence_span(cu_seqlens, block_table, table_stride, seq)
    for row0 in range(first, end, LP):
        rows, row_ok, pos, q_rows, w_rows = decode_row_group(q, q_scales, w, positions, row0, end, HI, DI, LP, HP, DP,
                                                             Q_QUANT, DOT_FP32, FP8_DOT)
        num_keys, chunk = split_chunk(pos, _row_splits(pos, num_splits, split_keys), min_chunk, BS)
        used = tl.cdiv(num_keys, chunk)
        lo = split * chunk
        hi = tl.minimum(lo + chunk, num_keys)
        sets = rows.to(tl.int64) * num_splits + split
        count, tau = _select_range(q_rows, w_rows, pos, sets, cache, table_row, set_keys, set_positions, lo, hi,
                                   scale, K, DI, PAGE, LP, HP, DP, BS, KP, U, KEY_QUANT, DOT_FP32, KEY_WORDS, FP8_DOT,
                                   NPB)
        # enough keys above each of the first used - 1 splits' quantiles make K in all
        quantile = _quantiles(set_keys, sets, count, tl.cdiv(K, tl.maximum(used - 1, 1)), LP, KP, U)
        tl.store(counts + sets, count, mask=row_ok)
        tl.store(floors + 2 * sets, tau.to(tl.int32, bitcast=True), mask=row_ok)
        tl.store(floors + 2 * sets + 1, quantile.to(tl.int32, bitcast=True), mask=row_ok)
        if split == 0:
            tl.store(num_splits_used + rows, tl.zeros([LP], dtype=tl.int32) + used, mask=row_ok)


@triton.jit
def _merge_floor(floors, first, used):
    """The largest key below which no candidate of the row can be in its Top-K (0: none known)."""
    j = tl.arange(0, FLOOR_BLOCK)
    kth = tl.zeros([], tl.uint32)
    quantile = tl.full([], 0xFFFFFFFF, tl.uint32)
    for j0 in range(0, used, FLOOR_BLOCK):
        split = j0 + j
        pair = floors + 2 * (first + split)
        kth_keys = tl.load(pair, mask=split < used, other=0).to(tl.uint32, bitcast=True)
        quantile_keys = tl.load(pair + 1, mask=split < used - 1, other=-1).to(tl.uint32, bitcast=True)
        kth = tl.maximum(kth, tl.max(kth_keys))
        quantile = tl.minimum(quantile, tl.min(quantile_keys))
    quantile = tl.where(used > 1, quantile, 0)
    return tl.maximum(kth, quantile)


@triton.jit
def _merge_select_kernel(set_keys, set_positions, counts, floors, num_splits_used, out, cu_seqlens, num_seqs,
                         num_splits, topk, stride, KP: tl.constexpr, U: tl.constexpr, SETS: tl.constexpr,
                         LAST: tl.constexpr):
    """Program (row, group) of the level at `stride`: fold the sets of splits leader + i * stride (leader = group *
    SETS * stride) into the leader's. A row whose leaders at this stride fit one program (cdiv(used, stride) <= SETS)
    is final here: its group 0 folds them into the output row, and the levels after leave the row alone. Elsewhere a
    group folds at most SETS sets in one step and leaves the set and its count in the leader's memory. The LAST
    level is final for every row left and folds any number of leaders, SETS - 1 more a step."""
    row = tl.program_id(0).to(tl.int64)
    group = tl.program_id(1)
    out_row = out + row * topk
    if row >= tl.load(cu_seqlens + num_seqs):
        if (stride == 1) & (group == 0):
            pad_row(out_row, 0, topk, KP)
        return
    first = row * num_splits
    used = tl.load(num_splits_used + row)
    final = (tl.cdiv(used, stride) <= SETS) | LAST
    # final at the level before (stride / SETS): already in the output
    done_before = (stride > 1) & (tl.cdiv(used, tl.maximum(stride // SETS, 1)) <= SETS)
    if done_before | (final & (group > 0)):
        return
    leader = group * SETS * stride
    members = tl.cdiv(used - leader, stride)
    members = tl.where(final, members, tl.minimum(members, SETS))
    if final | (members > 1):
        floor = _merge_floor(floors, first, used)
        base_keys = set_keys + (first + leader) * U
        base_positions = set_positions + (first + leader) * KP
        count = tl.load(counts + first + leader)
        lower = tl.zeros([], tl.uint32)
        # a step folds SETS - 1 members' sets into the running set (the leader's memory) with one search: the
        # union's lanes hold the running set, then each new set, so the union is in position order where the splits are
        lane = tl.arange(0, SETS * KP)
        member = lane // KP
        within = lane % KP
        for j in range(1, members, SETS - 1):
            m = j + member - 1
            n = tl.load(counts + first + leader + m * stride, mask=(member > 0) & (m < members), other=0)
            ok = within < tl.where(member == 0, count, n)
            key_offsets = tl.where(member == 0, within, m * stride * U + within)
            position_offsets = tl.where(member == 0, within, m * stride * KP + within)
            tl.debug_barrier()
            keys = tl.load(base_keys + key_offsets, mask=ok, other=0, cache_modifier=".cg").to(tl.uint32,
                                                                                              bitcast=True)
            keys = tl.where(keys >= floor, keys, 0)
            positions = tl.load(base_positions + position_offsets, mask=ok, other=0, cache_modifier=".cg")
            # with more than K entries left, all >= floor, the floor bounds the search too (and so does the last t)
            lower = tl.maximum(lower, floor)
            # a final row's last step is the answer, in position order: its positions go straight to the output
            last_step = final & (j + SETS - 1 >= members)
            target = tl.where(last_step, out_row, base_positions)
            count, lower = keep_best(keys, positions, base_keys, target, topk, lower)
        if final:
            if members == 1:
                tl.debug_barrier()
                keys, positions = load_set(base_keys, base_positions, count, floor, KP)
                write_positions(keys, positions, out_row, topk, KP)
            else:
                pad_row(out_row, count, topk, KP)
        else:
            tl.store(counts + first + leader, count)


def merge_strides(num_splits, sets: int) -> list[int]:
    """The merge's levels, by the stride between the splits a program folds: levels of up to `sets` sets a program at
    strides 1, sets, sets**2, ... until the leaders left of the most splits a row can take (a traced split count:
    MAX_SPLITS) are at most `sets`, so that a row of S splits folds in log_sets(S) dependent steps rather than
    (S - 1) / (sets - 1)."""
    bound = num_splits if isinstance(num_splits, int) else MAX_SPLITS
    strides = [1]
    while triton.cdiv(bound, strides[-1]) > sets:
        strides.append(strides[-1] * sets)
    return strides


def merge_groups(num_splits, sets: int, stride: int, last: bool):
    """Programs a row at the level of `stride`: one per `sets` leaders; none where every row is final at an earlier
    level (at most `stride` splits), which a traced split count expresses as a zero grid (the launch is skipped)."""
    if last and stride == 1:
        return 1
    needed = torch.sym_min(1, torch.sym_max(0, num_splits - stride)) if stride > 1 else 1
    return needed * triton.cdiv(num_splits, sets * stride)


def merge_sets_of(kp: int, sets: int | None) -> int:
    """Sets a merge step holds (the running set and sets - 1 new ones): a power of two >= 2; None: as many as make
    MERGE_UNION entries."""
    sets = max(2, MERGE_UNION // kp) if sets is None else sets
    assert sets >= 2 and sets & (sets - 1) == 0, f"merge_sets must be a power of two >= 2, got {sets}"
    assert sets * kp <= MAX_UNION, f"a merge step of {sets} sets of {kp} is over {MAX_UNION} entries"
    return sets


def select_num_splits(num_seqs: int, max_keys: int, min_chunk: int, device: torch.device) -> int:
    """Splits per sequence: as many programs as fit in one wave (two per SM), each split at least min_chunk keys, at
    most MAX_SPLITS; a second, partial wave would double the time of the last programs."""
    sms = device_info.num_sms(device, cpu_default=2)
    by_sms = torch.sym_min(MAX_SPLITS, (2 * sms) // torch.sym_max(num_seqs, 1))
    return torch.sym_max(1, torch.sym_min(by_sms, triton.cdiv(max_keys, min_chunk)))


def decode_row_tiles(rows_per_program: int, num_heads: int) -> tuple[int, int]:
    """(LP, HP) of the split kernel: LP query rows of HP (padded) heads share a key tile, at least 16 dot rows."""
    hp = triton.next_power_of_2(num_heads)
    # tl.dot needs at least 16 rows
    return max(rows_per_program, triton.cdiv(16, hp)), hp


def fp32_dot_block_keys(dot_rows: int) -> int:
    """Keys a tile of the fp32 (FMA) dot with `dot_rows` query-head rows: its logits kept to FP32_DOT_LOGITS, 16 to
    64 keys (the fp32 dot is the exact path for an fp32 cache, not a fast one)."""
    return max(16, min(64, FP32_DOT_LOGITS // dot_rows))


def decode_block_keys(key_quant: bool, dot_fp32: bool, fp8_dot: bool, dot_rows: int) -> int:
    """Keys a tile of the split kernel: 128 on the FP8 dot and on a BF16 cache's bf16 dot, fp32_dot_block_keys on the
    fp32 dot, 64 for MXFP8 keys on the bf16 dot. 128-key tiles take 27-35% less GPU time than 64 on the FP8 dot and
    1-5% less on the bf16 dot of a BF16 cache at 32K-128K keys (bench/bench_indexer.py)."""
    if dot_fp32 and not fp8_dot:
        return fp32_dot_block_keys(dot_rows)
    return FP8_DOT_BLOCK_KEYS if fp8_dot or not key_quant else 64


def index_topk_decode_select_launcher(
    q: torch.Tensor, w: torch.Tensor, cache: torch.Tensor, block_table: torch.Tensor, cu_seqlens: torch.Tensor,
    positions: torch.Tensor, topk: int, scale: float, q_scales: torch.Tensor | None, *, key_quant: bool,
    dot_fp32: bool, rows_per_program: int, num_splits: int | None = None, min_chunk: int | None = None,
    split_keys: int | None = None, block_keys: int | None = None, union_keys: int = 4096,
    merge_sets: int | None = None, out: torch.Tensor | None = None, page: int = PAGE_SIZE, launch=None,
) -> torch.Tensor:
    """q [T, HI, DI], w [T, HI], keys through block_table [N, max_pages] -> indices [T, topk] int32 (into `out`
    when given). `page`: keys a cache page holds (pooled index keys: PAGE_SIZE / kpool).

    rows_per_program: query rows sharing each key tile (power of two). The sizes below default to the launch plan
    (tests shrink them so that the interpreter's few hundred keys cross tiles, blocks, splits and merge levels):
    num_splits (select_num_splits), min_chunk (the fewest keys of a split; next_pow2(topk)), split_keys (a row takes a
    split per split_keys keys; min_chunk), block_keys (decode_block_keys), union_keys (a row's set + block length, a
    power of two; the block has union_keys - next_pow2(topk) keys), merge_sets (merge_sets_of).

    MXFP8 keys with DI a multiple of 128 load their codes and scales as int32 words (words_tiles_kernel.py: 0.228 /
    0.422 / 1.494 ms against byte loads' 0.248 / 0.595 / 2.205 at 8K / 32K / 128K keys, B64 HI 64 on an H200); an
    MXFP8 query over MXFP8 keys takes the FP8 tensor cores (fp8_dot_kernel.py) up to FP8_DOT_MAX_ROWS dot rows."""
    num_tokens, num_heads, dim = q.shape
    num_seqs = cu_seqlens.shape[0] - 1
    key_words = key_quant and dim % 128 == 0
    lp, hp = decode_row_tiles(rows_per_program, num_heads)
    fp8_dot = mxfp8_dot_applies(key_quant, q_scales, lp * hp)
    if block_keys is None:
        block_keys = decode_block_keys(key_quant, dot_fp32, fp8_dot, lp * hp)
    kp, union = union_layout(topk, union_keys, block_keys)
    min_chunk = kp if min_chunk is None else min_chunk
    split_keys = min_chunk if split_keys is None else split_keys
    if num_splits is None:
        num_splits = select_num_splits(num_seqs, block_table.shape[1] * page, min_chunk, q.device)
    num_sets = num_tokens * num_splits
    set_keys = torch.empty(num_sets * union, dtype=torch.int32, device=q.device)
    set_positions = torch.empty(num_sets * kp, dtype=torch.int32, device=q.device)
    counts = torch.empty(num_sets, dtype=torch.int32, device=q.device)
    floors = torch.empty(2 * num_sets, dtype=torch.int32, device=q.device)
    used = torch.empty(num_tokens, dtype=torch.int32, device=q.device)
    if out is None:
        out = torch.empty(num_tokens, topk, dtype=torch.int32, device=q.device)
    if num_tokens == 0:
        return out
    split_kernel = launch(_decode_select_kernel) if launch else _decode_select_kernel
    merge_kernel = launch(_merge_select_kernel) if launch else _merge_select_kernel
    if num_seqs > 0:
        split_kernel[(num_seqs, num_splits)](
            q, q if q_scales is None else q_scales, w, cache, block_table, positions, cu_seqlens, set_keys,
            set_positions, counts, floors, used, scale, num_splits, min_chunk, split_keys, block_table.stride(0), topk,
            HI=num_heads, DI=dim, PAGE=page, LP=lp, HP=hp, DP=max(16, triton.next_power_of_2(dim)),
            BS=block_keys, KP=kp, U=union, KEY_QUANT=key_quant, Q_QUANT=q_scales is not None, DOT_FP32=dot_fp32,
            KEY_WORDS=key_words, FP8_DOT=fp8_dot, NPB=block_page_count(union - kp, page, block_keys),
            num_warps=SPLIT_WARPS, num_stages=SPLIT_STAGES)
    sets = merge_sets_of(kp, merge_sets)
    strides = merge_strides(num_splits, sets)
    for level, stride in enumerate(strides):
        last = level == len(strides) - 1
        groups = merge_groups(num_splits, sets, stride, last)
        if isinstance(groups, int) and groups == 0:
            continue
        merge_kernel[(num_tokens, groups)](
            set_keys, set_positions, counts, floors, used, out, cu_seqlens, num_seqs, num_splits, topk, stride, KP=kp,
            U=union, SETS=sets, LAST=last, num_warps=MERGE_WARPS)
    return out

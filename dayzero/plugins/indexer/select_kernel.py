"""Exact Top-K selection on 32-bit score keys held in registers, for the decode indexer (decode_select_kernel.py).

A score key is the fp32 score mapped onto [1, 2^32) in its own order (0: no entry). A *set* is at most K entries
(keys and int32 positions) in position order. `keep_best` takes a set plus entries of later positions and keeps the
K best of their union: the union's K-th best key t comes from a bitwise search (one block-wide count per bit, from
the first bit where the known bounds differ), then every entry above t and the earliest entries equal to t are
compacted, in order, into the set's memory. Ties therefore go to the earlier position, as in the reference; no
sort happens before the final K.
"""

from __future__ import annotations

import triton
import triton.language as tl

# entries of a union are counted in two 16-bit halves of one int32 scan
MAX_UNION = 32767


@triton.jit
def score_keys(scores, visible):
    """fp32 scores -> uint32 keys in score order, >= 1 (0 where not visible); -0.0 and +0.0 are one key."""
    # the reference ranks the relu zeros of either sign as one score
    scores = tl.where(scores == 0.0, 0.0, scores)
    bits = scores.to(tl.int32, bitcast=True)
    unsigned = bits.to(tl.uint32, bitcast=True)
    keys = tl.where(bits >= 0, unsigned | 0x80000000, ~unsigned)
    return tl.where(visible, keys, 0)


@triton.jit
def _bits_below_highest(x):
    """uint32 scalar -> every bit at and below its highest set bit (0 for 0)."""
    x = x | (x >> 1)
    x = x | (x >> 2)
    x = x | (x >> 4)
    x = x | (x >> 8)
    return x | (x >> 16)


@triton.jit
def kth_key(keys, K, lower):
    """keys uint32 [U] (0: none) with at least K nonzero, `lower` a key with at least K keys >= it (or 0)
    -> t with #(keys >= t) >= K and either #(keys > t) < K (t is the K-th best key) or #(keys >= t) == K."""
    # the answer lies in [lower, max]: it shares their common leading bits
    free = _bits_below_highest(lower ^ tl.max(keys))
    t = lower & ~free
    done = (free == 0).to(tl.int32)
    for i in range(32):
        bit = tl.full([], 1 << 31, tl.uint32) >> i
        if ((free & bit) != 0) & (done == 0):
            candidate = t | bit
            count = tl.sum((keys >= candidate).to(tl.int32))
            t = tl.where(count >= K, candidate, t)
            done = (count == K).to(tl.int32)
    return t


@triton.jit
def _threshold(keys, K, lower):
    """(t, need, kept) of a union: the K-th best key t (0 when at most K entries), how many entries equal to t are
    kept, and how many entries are kept in all."""
    num = tl.sum((keys > 0).to(tl.int32))
    if num > K:
        t = kth_key(keys, K, lower)
        need = K - tl.sum((keys > t).to(tl.int32))
        kept = K
    else:
        t = tl.zeros([], tl.uint32)
        need = 0
        kept = num
    return t, need, kept


@triton.jit
def keep_best(keys, positions, set_keys, set_positions, K, lower):
    """Keep the K best entries of keys / positions [U] (position order; key 0: none; U <= MAX_UNION) in
    set_keys / set_positions [0, kept), position order -> (kept, t): t a key with K kept entries >= it, 0 when
    fewer than K are kept. `lower`: a key with at least K entries >= it, or 0. set_keys holds int32 bit patterns.

    The caller loads the entries after a barrier; the set's memory may be among the loaded addresses."""
    t, need, kept = _threshold(keys, K, lower)
    above = keys > t
    tied = (keys == t) & (keys > 0)
    scan = tl.cumsum(above.to(tl.int32) + (tied.to(tl.int32) << 16), axis=0)
    tied_rank = scan >> 16
    take = above | (tied & (tied_rank <= need))
    slot = (scan & 65535) + tl.minimum(tied_rank, need) - 1
    # every thread has loaded its entries before compacted ones may overwrite them (slots only move left)
    tl.debug_barrier()
    tl.store(set_keys + slot, keys.to(tl.int32, bitcast=True), mask=take)
    tl.store(set_positions + slot, positions, mask=take)
    return kept, t


@triton.jit
def load_set(set_keys, set_positions, count, floor, KP: tl.constexpr):
    """The `count` entries of a set (keys below `floor` dropped) -> keys uint32 [KP] (0: none), positions [KP]."""
    offs = tl.arange(0, KP)
    ok = offs < count
    keys = tl.load(set_keys + offs, mask=ok, other=0, cache_modifier=".cg").to(tl.uint32, bitcast=True)
    keys = tl.where(keys >= floor, keys, 0)
    return keys, tl.load(set_positions + offs, mask=ok, other=-1, cache_modifier=".cg")


@triton.jit
def write_positions(keys, positions, out_row, topk, KP: tl.constexpr):
    """Entries keys / positions [KP] (key 0: none) of a set in position order (keep_best's) -> their positions,
    ascending, -1 padded, into out_row[:topk]."""
    kept = keys > 0
    slot = tl.cumsum(kept.to(tl.int32), axis=0) - 1
    pad_row(out_row, tl.sum(kept.to(tl.int32), axis=0), topk, KP)
    tl.store(out_row + slot, positions, mask=kept & (slot < topk))


@triton.jit
def pad_row(out_row, count, topk, KP: tl.constexpr):
    """-1 into out_row[count:topk]: the entries of a row past its `count` picks."""
    offs = tl.arange(0, KP)
    tl.store(out_row + offs, tl.full([KP], -1, tl.int32), mask=(offs >= count) & (offs < topk))


def union_layout(topk: int, union_keys: int, block_keys: int) -> tuple[int, int]:
    """(KP, U): KP the set length (power of two >= topk, block_keys), U the union length of a set and a block of
    new keys (power of two, > KP; the block a multiple of block_keys)."""
    kp = max(16, triton.next_power_of_2(topk), block_keys)
    union = max(triton.next_power_of_2(union_keys), 2 * kp)
    assert union <= MAX_UNION, f"a union of {union} keys is over {MAX_UNION}: topk {topk} too large"
    return kp, union
